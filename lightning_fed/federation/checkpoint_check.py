"""One check of a whole checkpoint against the run about to use it, before anything is written.

A resumed fit reads much more than its weights: the federation's report, strategy, hooks and
privacy state, Lightning's loop counters, ``global_step``, the optimizer and scheduler states,
the callbacks' states. Each part is input, and a part that does not fit the run fails late if
at all: an ``AttributeError`` when ``federation`` is a list, a negative ``len`` when
``report.rounds`` is ``-1``, ten files rewritten before ``report.rounds = 10**9`` meets the loop
counter, a ``TypeError`` in round 3 from junk in ``federation.privacy``, every update rejected
when a weight is ``3e38``. :func:`checkpoint_problem` checks every part against what this run's
config implies (its module, its server with its strategy, hooks and privacy plan) and returns
the first problem as ``(part, what is wrong)``; :func:`check_checkpoint` raises it as one line:
the CLI calls it before the data is set up and before the run folder is touched.

What a run of this config writes, and so what is accepted:

* ``federation``: a mapping (a fit resumes the federation from it: without it the round, the
  history and the global state would start afresh while Lightning's loop continues);
* ``federation.report.rounds``: the rounds Lightning's loop completed
  (``loops.fit_loop.epoch_progress``), and ``global_step`` the optimizer steps it counted;
* ``federation.strategy`` / ``hooks`` / ``privacy``: what this run's objects load without error
  (tried on copies), every tensor finite; the strategy keeps every key of its state as it is
  (no key it ignores, tensors named by the shared parameters); the privacy state is there when
  the run is private;
* ``optimizer_states`` / ``lr_schedulers``: field by field against the optimizers and schedulers
  the module configures (:mod:`~lightning_fed.federation.optimizer_check`);
* ``state_dict`` and ``federation.global_state``: every shared parameter, of its shape, finite
  and at most :data:`MAX_WEIGHT` in magnitude (:func:`~lightning_fed.federation.resume_check.check_weights`).

Lightning's loop counters are checked in :mod:`~lightning_fed.federation.checkpoint_loops`; the
helpers that read values (tensors by path, non-finite, too large) are
:mod:`~lightning_fed.federation.checkpoint_values`.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from lightning_fed.errors import CheckpointError
from lightning_fed.federation.cache_state import cache_state_problem
from lightning_fed.federation.checkpoint_loops import count, loop_problem, mid_round_problem
from lightning_fed.federation.checkpoint_values import (
    MAX_WEIGHT,
    Problem,
    is_int,
    kind,
    non_finite,
    show,
    tensors,
    too_large,
)
from lightning_fed.federation.optimizer_check import optimizer_problem
from lightning_fed.federation.strategy_check import counter_problem, kept_problem, per_parameter_problem

__all__ = ["MAX_WEIGHT", "Problem", "check_checkpoint", "checkpoint_error", "checkpoint_problem", "file_problem"]


def report_problem(report: Any) -> Problem | None:
    """What is wrong with ``federation.report`` (:meth:`RoundReport.state_dict`)."""
    where = "federation.report"
    if not isinstance(report, Mapping):
        return where, f"is a {kind(report)}, expected a mapping"
    if "history" in report:  # an earlier version's checkpoint: the records themselves
        history = report["history"]
        if not isinstance(history, list) or not all(isinstance(r, Mapping) for r in history):
            return f"{where}.history", f"is a {kind(history)}, expected a list of round records"
    else:
        rounds = report.get("rounds")
        if not is_int(rounds) or rounds < 0:
            return f"{where}.rounds", f"is {show(rounds)}, expected a number of rounds >= 0"
        folder = report.get("folder")
        if folder is not None and not isinstance(folder, str):
            return f"{where}.folder", f"is a {kind(folder)}, expected a path"
    for key in ("initial_eval", "config"):
        value = report.get(key)
        if value is not None and not isinstance(value, Mapping):
            return f"{where}.{key}", f"is a {kind(value)}, expected a mapping"
    return non_finite(report.get("initial_eval"), f"{where}.initial_eval")


def recorded_rounds(report: Mapping[str, Any]) -> int:
    return len(report["history"]) if "history" in report else report["rounds"]


def loads(obj: Any, state: Any, where: str) -> Problem | None:
    """Try ``obj.load_state_dict(state)`` on a copy of ``obj``: its error, if any, as a problem."""
    if not isinstance(state, Mapping):
        return where, f"is a {kind(state)}, expected a mapping"
    if problem := non_finite(state, where):
        return problem
    try:
        copy.deepcopy(obj).load_state_dict(copy.deepcopy(dict(state)))
    except Exception as err:  # noqa: BLE001 - any way the run's object refuses it is the checkpoint's fault
        first = " ".join(str(err).split())[:160]
        return where, f"does not load into this run's {kind(obj)} ({kind(err)}: {first})"
    return None


def strategy_problem(state: Any, strategy: Any, module: Any = None, rounds: int | None = None) -> Problem | None:
    """``federation.strategy``: loadable into a copy of the run's strategy, finite, its server-step
    counters within the ``rounds`` recorded, and every key there and kept as it is
    (:func:`kept_problem`): an unknown key was accepted silently."""
    where = "federation.strategy"
    if problem := loads(strategy, state, where):
        return problem
    if rounds is not None and (problem := counter_problem(state, rounds, where)):
        return problem
    trial = copy.deepcopy(strategy)
    trial.load_state_dict(copy.deepcopy(dict(state)))
    shared = module.shared_parameters() if hasattr(module, "shared_parameters") else None
    names = set(shared) if shared is not None else None
    if shared is not None and (
        problem := per_parameter_problem(state, {n: p.shape for n, p in shared.items()}, where, MAX_WEIGHT)
    ):
        return problem
    owner = f"this run's {kind(strategy)}"
    return kept_problem(state, trial.state_dict(), strategy.state_dict(), where, owner, names)


PRIVACY_FIELDS: dict[str, Any] = {
    "rounds_accounted": lambda v: is_int(v) and v >= 0,
    "stop": lambda v: v is None or (is_int(v) and v >= 0),
    "example_clients": lambda v: (
        isinstance(v, Mapping)
        and all(
            is_int(k) and isinstance(x, (list, tuple)) and len(x) == 2 and all(is_int(i) and i >= 0 for i in x)
            for k, x in v.items()
        )
    ),
    "example_planned_rounds": lambda v: is_int(v) and v >= 0,
    "planned_rounds": lambda v: is_int(v) and v >= 1,
    "noise_multiplier": lambda v: (
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    ),
    # the run id and the key's fingerprint (privacy/secret.py RunKey.state_dict): never the key
    "run_key": lambda v: (
        isinstance(v, Mapping)
        and set(v) == {"id", "fingerprint"}
        and isinstance(v["id"], str)
        and re.fullmatch(r"[0-9a-f]{32}", v["id"]) is not None
        and isinstance(v["fingerprint"], str)
        and re.fullmatch(r"[0-9a-f]{16}", v["fingerprint"]) is not None
    ),
}
"""Each field of :meth:`~lightning_fed.privacy.run.RunPrivacy.state_dict` and what it must be."""


def privacy_problem(state: Any, rounds: int, private: bool, processed: int | None = None) -> Problem | None:
    """``federation.privacy`` (checked by its fields: loading it resumes the run's key file).

    ``processed`` is the rounds Lightning's loop state went through: where the accountant's count
    and ``federation.report.rounds`` disagree, it says which of the two was changed."""
    where = "federation.privacy"
    if state is None:
        if private and rounds > 0:
            return where, f"is missing, but this run is private and {rounds} rounds were accounted"
        return None
    if not isinstance(state, Mapping):
        return where, f"is a {kind(state)}, expected a mapping"
    for key, value in state.items():
        check = PRIVACY_FIELDS.get(key)
        if check is None:
            return f"{where}.{key}", f"is not a field of a run's privacy state (one of {sorted(PRIVACY_FIELDS)})"
        if not check(value):
            return f"{where}.{key}", f"is {show(value)}, not what a run's privacy state holds"
    accounted = state.get("rounds_accounted")
    if is_int(accounted) and accounted > rounds:
        if processed is not None and accounted == processed:  # the accountant and the loop agree
            return (
                "federation.report.rounds",
                f"is {rounds}, but the privacy accountant counted {accounted} rounds"
                f" (federation.privacy.rounds_accounted) and Lightning's loop state {processed}"
                " (loops.fit_loop.epoch_progress)",
            )
        return (
            f"{where}.rounds_accounted",
            f"is {accounted}, more than the {rounds} rounds recorded (federation.report.rounds)",
        )
    return None


def federation_problem(ckpt: Mapping[str, Any], server: Any, module: Any = None) -> Problem | None:
    """The ``federation`` section: what it says of itself and of Lightning's loop (``server`` ``None``:
    only that), then against the run's server (its strategy, hooks and privacy plan)."""
    fed = ckpt.get("federation")
    if fed is None:
        return (
            "federation",
            "is missing: the federation's rounds, history and global state would start afresh while"
            " Lightning's loop continues; resume from a checkpoint lightning-fed fit wrote",
        )
    if not isinstance(fed, Mapping):
        return "federation", f"is a {kind(fed)}, expected a mapping"
    if problem := report_problem(fed.get("report", {})):
        return problem
    rounds = recorded_rounds(fed.get("report", {}) or {"rounds": 0})
    if problem := loop_problem(ckpt, rounds):
        return problem
    processed = count(ckpt["loops"].get("fit_loop"), "epoch_progress", "current", "processed")
    if problem := privacy_problem(fed.get("privacy"), rounds, False, processed):
        return problem
    if server is None:
        return None
    if problem := strategy_problem(fed.get("strategy", {}), server.strategy, module, rounds):
        return problem
    hooks = fed.get("hooks", [])
    if not isinstance(hooks, list) or len(hooks) not in (0, len(server.hooks)):
        n = len(hooks) if isinstance(hooks, list) else kind(hooks)
        return "federation.hooks", f"holds {n} states, this run has {len(server.hooks)} round hooks"
    for i, (hook, state) in enumerate(zip(server.hooks, hooks)):
        if problem := loads(hook, state, f"federation.hooks[{i}]"):
            return problem
    private = getattr(server, "privacy", None) is not None and getattr(server.privacy, "config", None) is not None
    return privacy_problem(fed.get("privacy"), rounds, private, processed)


def callbacks_problem(ckpt: Mapping[str, Any]) -> Problem | None:
    """The loop's own callback state: its counters."""
    state = ckpt["callbacks"].get("FederatedLoop")
    if state is None:
        return None
    if not isinstance(state, Mapping):
        return "callbacks.FederatedLoop", f"is a {kind(state)}, expected a mapping"
    for key, value in state.items():
        if not is_int(value) or value < 0:
            return f"callbacks.FederatedLoop.{key}", f"is {show(value)}, expected a count >= 0"
    return None


CHECKED_ELSEWHERE = ("state_dict", "federation.global_state", "optimizer_states")
"""Checked against the model, with messages of their own naming the parameter: the weights by
:func:`~lightning_fed.federation.resume_check.check_weights`, the optimizers' states by
:func:`~lightning_fed.federation.optimizer_check.optimizer_problem`."""


def finite_problem(ckpt: Mapping[str, Any]) -> Problem | None:
    """Every tensor of the checkpoint finite (the DPO reference cache's log-probabilities, a
    scheduler's, a hook's, the report's: a NaN there was accepted, found from outside), but those
    of Lightning's own callbacks, where infinity means "no score yet" (``ModelCheckpoint``'s
    ``kth_value``) and only NaN is refused; :data:`CHECKED_ELSEWHERE` is left to its own checks."""
    for key, value in ckpt.items():
        if key == "callbacks":
            for where, t in tensors(value, "callbacks"):
                if t.is_floating_point() and bool(torch.isnan(t).any()):
                    return where, "has NaN values"
            continue
        for where, t in tensors(value, str(key)):
            if any(where == w or where.startswith((w + ".", w + "[")) for w in CHECKED_ELSEWHERE):
                continue
            if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
                return where, "has NaN or infinite values"
    return None


def file_problem(ckpt: Mapping[str, Any], stage: str = "fit", federated: bool = True) -> Problem | None:
    """The first part of ``ckpt`` that is wrong whatever the run's model: what the checkpoint says
    of itself (its counters against each other, every tensor finite, no weight past
    :data:`MAX_WEIGHT`). It needs neither the model nor the server, so the CLI checks it right after
    the config, before Lightning is imported (:mod:`~lightning_fed.federation.early_check`);
    :func:`checkpoint_problem` checks it first, so both say the same of the same checkpoint.

    Args:
        ckpt: The checkpoint as :func:`~lightning_fed.federation.checkpoint_read.read_checkpoint` read it.
        stage: ``"fit"`` checks everything a resume restores; other stages only the weights.
        federated: Whether the run's module is federated (it has a ``federation`` section to resume).
    """
    if "reference_cache" in ckpt and (problem := cache_state_problem(ckpt["reference_cache"])):
        part, _, what = problem.partition(" ")  # the DPO module restores it for every stage
        return part, what
    weights = [("state_dict", ckpt.get("state_dict"))]
    fed = ckpt.get("federation")
    if isinstance(fed, Mapping) and isinstance(fed.get("global_state"), Mapping):
        weights.append(("federation.global_state", fed["global_state"]))
    for where, state in weights:
        if problem := too_large(state, where):
            return problem
    if stage != "fit":
        if fed is not None and not isinstance(fed, Mapping):
            return "federation", f"is a {kind(fed)}, expected a mapping"
        loops = ckpt.get("loops")
        fit = loops.get("fit_loop") if isinstance(loops, Mapping) else None
        return mid_round_problem(fit, stage) if isinstance(fit, Mapping) else None  # as fit says it
    if federated and (problem := federation_problem(ckpt, None)):
        return problem
    if problem := callbacks_problem(ckpt):
        return problem
    return finite_problem(ckpt)


def checkpoint_problem(ckpt: Mapping[str, Any], module: Any, server: Any = None, stage: str = "fit") -> Problem | None:
    """The first part of ``ckpt`` that does not fit this run, or ``None``: :func:`file_problem`, then
    the parts against the run's objects (the strategy, hooks and privacy plan of ``server``, the
    optimizers ``module`` configures).

    Args:
        ckpt: The checkpoint as :func:`~lightning_fed.federation.checkpoint_io.read_checkpoint`
            read it for ``stage`` (its top-level fields have the types Lightning needs).
        module: The run's module (a :class:`~lightning_fed.modules.base.FederatedModule`).
        server: The run's :class:`~lightning_fed.federation.server_round.ServerRound` (``fit``).
        stage: ``"fit"`` checks everything a resume restores; other stages only the weights.
    """
    federated = hasattr(module, "shared_parameters")
    if problem := file_problem(ckpt, stage, federated):
        return problem
    if stage != "fit":
        return None
    if federated and server is not None and (problem := federation_problem(ckpt, server, module)):
        return problem
    if server is not None and (problem := seed_problem(ckpt, server)):
        return problem
    return optimizer_problem(ckpt, module, server)


def seed_problem(ckpt: Mapping[str, Any], server: Any) -> Problem | None:
    """The seed the loop saved (restored on resume: it samples every round's clients) against this
    run's: an edited one would sample other clients from the next round on."""
    state = ckpt["callbacks"].get("FederatedLoop")
    seed = getattr(server, "seed", None)
    if isinstance(state, Mapping) and "seed" in state and seed is not None and state["seed"] != seed:
        return (
            "callbacks.FederatedLoop.seed",
            f"is {show(state['seed'])}, but this run's federation seed is {seed} (it samples every round's clients)",
        )
    return None


def checkpoint_error(path: str | Path, problem: Problem) -> CheckpointError:
    """``problem`` as the one line the CLI prints: ``ckpt_path '<file>': <part> <what is wrong>``."""
    part, what = problem
    return CheckpointError(" ".join(f"ckpt_path {str(path)!r}: {part} {what}".split()))


def check_checkpoint(
    path: str | Path, ckpt: Mapping[str, Any], module: Any, server: Any = None, stage: str = "fit"
) -> None:
    """:func:`checkpoint_problem`, then the weights (:func:`~lightning_fed.federation.resume_check.check_weights`).

    Raises:
        CheckpointError: ``"ckpt_path '<file>': <part> <what is wrong>"``, one line.
    """
    from lightning_fed.federation.resume_check import check_weights

    problem = checkpoint_problem(ckpt, module, server, stage)
    if problem is not None:
        raise checkpoint_error(path, problem)
    try:
        check_weights(path, ckpt, module)
    except CheckpointError as err:  # the client state files beside it: named after the checkpoint too
        prefix = f"ckpt_path {str(path)!r}"
        if str(err).startswith(prefix):
            raise
        raise CheckpointError(f"{prefix}: {err}") from None
