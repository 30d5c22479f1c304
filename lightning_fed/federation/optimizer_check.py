"""A checkpoint's optimizer and scheduler states, field by field, against the run's own.

Lightning restores ``optimizer_states`` with ``Optimizer.load_state_dict``, which takes every
setting of a saved param group as it is: an ``lr`` of NaN, ``-1``, ``1e300`` or ``"x"`` was
accepted, and the run failed with exit 1 once training started (or trained every client with a
rate nobody configured). What a run of this config writes, and so what is accepted:

* one optimizer state per optimizer the module configures (:func:`configured`), each with the
  param groups of that optimizer: the same parameter indices (``params``), the same settings
  (``betas``, ``eps``, ``weight_decay``, ``amsgrad``...) as the freshly configured optimizer (the
  config decides them; :func:`~lightning_fed.federation.resume_check.check_resume` holds the config
  to the run's), no setting it does not have, and the configured ``lr``, unless the run sets the
  rate itself before every client's steps (a round schedule, FedPDPO's decay: :func:`sets_lr`) or
  a scheduler sets it, when it is the last rate set: a finite number >= 0;
* ``state``: entries only for those indices, each holding what a step of this optimizer keeps
  (``step``, ``exp_avg``...), tensors of the parameter's shape, finite (a client's turn clears the
  state before its first step, so a run saved between turns writes none);
* ``lr_schedulers``: one per scheduler, the settings of the configured scheduler, its progress
  counters whole numbers >= 0 and its last rates finite numbers >= 0.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import torch

from lightning_fed.federation.checkpoint_values import is_int as _is_int
from lightning_fed.federation.checkpoint_values import show as _show

Problem = tuple[str, str]

PROGRESS = frozenset({"last_epoch", "_step_count", "_last_lr", "_get_lr_called_within_step", "_is_initial"})
"""A scheduler's fields that count its progress: they differ from a fresh scheduler's."""


def _rate(value: Any) -> bool:
    """A learning rate a run may have set: a finite real number >= 0."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def same(a: Any, b: Any) -> bool:
    """``a == b`` for settings (numbers, tuples, flags, ``None``, tensors), never an exception."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (
            isinstance(a, (tuple, list))
            and isinstance(b, (tuple, list))
            and len(a) == len(b)
            and all(same(x, y) for x, y in zip(a, b))
        )
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b  # NaN is never the setting
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - an object whose == raises is not the setting
        return False


def configured(module: Any) -> tuple[list[torch.optim.Optimizer], list[Any]] | None:
    """The optimizers and schedulers ``module.configure_optimizers()`` returns (``None``: unknown form)."""
    try:
        out = module.configure_optimizers()
    except Exception:  # noqa: BLE001 - a module whose optimizers need the Trainer: not checked here
        return None
    if isinstance(out, torch.optim.Optimizer):
        return [out], []
    if isinstance(out, Mapping) and isinstance(out.get("optimizer"), torch.optim.Optimizer):
        scheduler = out.get("lr_scheduler")
        if isinstance(scheduler, Mapping):  # Lightning's {"scheduler": ..., "interval": ...}
            scheduler = scheduler.get("scheduler")
        return [out["optimizer"]], [scheduler] if scheduler is not None else []
    if isinstance(out, (list, tuple)) and len(out) == 2 and isinstance(out[0], (list, tuple)):
        schedulers = [s.get("scheduler") if isinstance(s, Mapping) else s for s in out[1]]
        return list(out[0]), schedulers
    if isinstance(out, (list, tuple)) and all(isinstance(o, torch.optim.Optimizer) for o in out):
        return list(out), []
    return None


def sets_lr(module: Any, server: Any) -> bool:
    """Whether the run sets its optimizers' rate before each client's steps (a round hook with
    ``sets_lr``, a module with ``sets_lr``): then a checkpoint holds the last rate set, not the
    configured one, and that rate is never used for a step."""
    hooks = getattr(server, "hooks", None) or []
    return bool(getattr(module, "sets_lr", False)) or any(getattr(h, "sets_lr", False) for h in hooks)


def _step_names(opt: torch.optim.Optimizer) -> set[str] | None:
    """What a step of ``opt`` keeps per parameter (``step``, ``exp_avg``...), from one step of a
    copy on zero gradients (``None`` if that step fails)."""
    trial = copy.deepcopy(opt)
    try:
        for group in trial.param_groups:
            for p in group["params"]:
                p.grad = torch.zeros_like(p)
        trial.step()
    except Exception:  # noqa: BLE001 - an optimizer that cannot step so: its names are not checked
        return None
    return {name for entry in trial.state.values() for name in entry}


def _group_problem(
    saved: Mapping[str, Any], loaded: Mapping[str, Any], fresh: Mapping[str, Any], where: str, free_lr: bool
) -> Problem | None:
    """One param group: ``saved`` (the checkpoint's), ``loaded`` (a copy of the optimizer after
    loading it: what a step would use), ``fresh`` (the configured optimizer's state_dict group)."""
    for key in saved:
        if key not in fresh:
            return f"{where}.{key}", f"is not a setting of this run's optimizer (one of {sorted(fresh)})"
    for key, want in fresh.items():
        if key == "params":
            continue
        if key not in loaded:
            return f"{where}.{key}", f"is missing, this run's configured optimizer has {_show(want)}"
        got = loaded[key]
        if key == "lr" and free_lr:
            if not _rate(got):
                return f"{where}.lr", f"is {_show(got)}, expected a finite learning rate >= 0"
        elif not same(got, want):
            return f"{where}.{key}", f"is {_show(got)}, this run's configured optimizer has {_show(want)}"
    return None


def _state_problem(state: Any, params: list[torch.Tensor], names: set[str] | None, where: str) -> Problem | None:
    if not isinstance(state, Mapping):
        return where, f"is a {type(state).__name__}, expected a mapping of parameter indices"
    for index, entry in state.items():
        if not _is_int(index) or not 0 <= index < len(params):
            return where, f"entry {_show(index)} names no parameter of this model's optimizer"
        if not isinstance(entry, Mapping):
            return f"{where}[{index}]", f"is a {type(entry).__name__}, expected a mapping of named tensors"
        shape = tuple(params[index].shape)
        for name, t in entry.items():
            at = f"{where}[{index}].{name}"
            if names is not None and name not in names:
                return at, f"is not kept by this run's optimizer (it keeps {sorted(names)})"
            if isinstance(t, torch.Tensor):
                if not t.is_floating_point():
                    return at, f"is a {str(t.dtype).removeprefix('torch.')} tensor, expected floating point"
                if not bool(torch.isfinite(t).all()):
                    return at, "has NaN or infinite values"
                if t.dim() == 0 and name == "step" and float(t) < 0:
                    return at, f"is {float(t)}, expected a step count >= 0"
                if t.dim() > 0 and tuple(t.shape) != shape:
                    return at, f"has shape {tuple(t.shape)}, its parameter's is {shape}"
            elif not (_rate(t) if name == "step" else t is None):
                return at, f"is {_show(t)}, expected a tensor"
    return None


def _optimizer_problem(saved: Any, opt: torch.optim.Optimizer, where: str, free_lr: bool) -> Problem | None:
    if not isinstance(saved, Mapping) or set(saved) != {"state", "param_groups"}:
        return where, "is not an optimizer's state (a mapping of 'state' and 'param_groups')"
    fresh = opt.state_dict()["param_groups"]
    groups = saved["param_groups"]
    if not isinstance(groups, (list, tuple)) or len(groups) != len(fresh):
        n = len(groups) if isinstance(groups, (list, tuple)) else type(groups).__name__
        return f"{where}.param_groups", f"holds {n} param groups, this run's configured optimizer has {len(fresh)}"
    for i, (group, want) in enumerate(zip(groups, fresh)):
        at = f"{where}.param_groups[{i}]"
        if not isinstance(group, Mapping):
            return at, f"is a {type(group).__name__}, expected a mapping of settings"
        if not same(group.get("params"), want["params"]):  # the indices the state is keyed by
            return (
                f"{at}.params",
                f"is {_show(group.get('params'))}, this run's configured optimizer has {_show(want['params'])}",
            )
    params = [p for group in opt.param_groups for p in group["params"]]
    if problem := _state_problem(saved["state"], params, _step_names(opt), f"{where}.state"):
        return problem
    trial = copy.deepcopy(opt)
    try:
        trial.load_state_dict(copy.deepcopy(dict(saved)))
    except Exception as err:  # noqa: BLE001 - any way the optimizer refuses it is the checkpoint's fault
        first = " ".join(str(err).split())[:160]
        return where, f"does not load into this run's {type(opt).__name__} ({type(err).__name__}: {first})"
    for i, (group, loaded, want) in enumerate(zip(groups, trial.param_groups, fresh)):
        if problem := _group_problem(group, loaded, want, f"{where}.param_groups[{i}]", free_lr):
            return problem
    return None


def _scheduler_problem(saved: Any, scheduler: Any, where: str) -> Problem | None:
    if not isinstance(saved, Mapping):
        return where, f"is a {type(saved).__name__}, expected a scheduler's state"
    fresh = scheduler.state_dict()
    for key, value in saved.items():
        at = f"{where}.{key}"
        if key not in fresh:
            return at, f"is not a field of this run's {type(scheduler).__name__} (one of {sorted(fresh)})"
        if key in ("last_epoch", "_step_count"):
            if not _is_int(value) or value < 0:
                return at, f"is {_show(value)}, expected a count >= 0"
        elif key == "_last_lr":
            if not isinstance(value, (list, tuple)) or len(value) != len(fresh[key]) or not all(map(_rate, value)):
                return at, f"is {_show(value)}, expected {len(fresh[key])} finite learning rates >= 0"
        elif key not in PROGRESS and not same(value, fresh[key]):
            return at, f"is {_show(value)}, this run's scheduler has {_show(fresh[key])}"
    return None


def optimizer_problem(ckpt: Mapping[str, Any], module: Any, server: Any = None) -> Problem | None:
    """``optimizer_states`` and ``lr_schedulers`` against what ``module`` configures (see the module docstring)."""
    states, schedulers_saved = ckpt["optimizer_states"], ckpt["lr_schedulers"]
    made = configured(module)
    if made is None:
        return None
    optimizers, schedulers = made
    if len(states) != len(optimizers):
        return "optimizer_states", f"holds {len(states)} optimizer states, this model configures {len(optimizers)}"
    if len(schedulers_saved) != len(schedulers):
        return (
            "lr_schedulers",
            f"holds {len(schedulers_saved)} scheduler states, this model configures {len(schedulers)}",
        )
    free_lr = sets_lr(module, server) or bool(schedulers)  # a scheduler's rate: its own fields are checked
    for i, (state, opt) in enumerate(zip(states, optimizers)):
        if problem := _optimizer_problem(state, opt, f"optimizer_states[{i}]", free_lr):
            return problem
    for i, (state, scheduler) in enumerate(zip(schedulers_saved, schedulers)):
        if problem := _scheduler_problem(state, scheduler, f"lr_schedulers[{i}]"):
            return problem
    return None
