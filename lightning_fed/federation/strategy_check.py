"""A strategy's state in a checkpoint, key by key, against what the run's strategy keeps of it.

A strategy loads its state with ``state.get(key, default)``: a key it does not know is dropped
silently (``FedAvg {'m': ...}`` was accepted), a value it converts (``int(1.5)``) is not the one
saved. :func:`kept_problem` compares the checkpoint's state with the strategy's ``state_dict()``
after loading it (and with a fresh strategy's, for the keys every run writes);
:func:`counter_problem` holds its server-step counters to the rounds recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from lightning_fed.federation.optimizer_check import _is_int, _show, same

Problem = tuple[str, str]


def _names_shared(key: Any, names: set[str]) -> bool:
    """``key`` names a shared parameter, or a module holding some (FLoRA's and FlexLoRA's per-module products)."""
    return isinstance(key, str) and (key in names or any(n.startswith(f"{key}.") for n in names))


PARAMETER_SHAPED = frozenset({"m", "v", "velocity", "control", "buffer"})
"""Strategy states kept per shared parameter in the parameter's own shape (FedOpt's moments,
FedAvgM's velocity, SCAFFOLD's control, FedBuff's buffer); others keyed by a parameter's name
hold other shapes (FLoRA's stacked factors) and are left to the strategy's own load."""
SECOND_MOMENTS = frozenset({"v"})
"""Per-parameter states of squares (FedAdam's, FedYogi's and FedAdagrad's ``v``): never negative
(a negative entry makes the server step's square root NaN; found from outside: loss nan, exit 0)."""


def per_parameter_problem(
    state: Any, shapes: Mapping[str, torch.Size], where: str, bound: float = float("inf")
) -> Problem | None:
    """A tensor kept per shared parameter whose shape is not the parameter's (found from outside: a
    FedAdam moment of the wrong shape ended in exit 1 with torch's size error), or a negative
    second moment."""
    if not isinstance(state, Mapping):
        return None
    for key, value in state.items():
        at = f"{where}.{key}"
        parent = where.rpartition(".")[2]
        if isinstance(value, torch.Tensor) and isinstance(key, str) and key in shapes and parent in PARAMETER_SHAPED:
            if tuple(value.shape) != tuple(shapes[key]):
                return at, f"has shape {tuple(value.shape)}, the parameter has {tuple(shapes[key])}"
            limit = bound**2 if parent in SECOND_MOMENTS else bound  # a second moment is of squares
            if value.is_floating_point() and value.numel() and float(value.abs().max()) > limit:
                return at, f"has entries past {limit:g} in magnitude (a weight is at most {bound:g})"
            if parent in SECOND_MOMENTS and value.is_floating_point() and bool((value < 0).any()):
                return at, "has negative entries (a second moment is a mean of squares)"
        elif problem := per_parameter_problem(value, shapes, at, bound):
            return problem
    return None


def kept_problem(
    state: Any, kept: Any, fresh: Any, where: str, owner: str, names: set[str] | None = None
) -> Problem | None:
    """The first key path of ``state`` that its ``owner`` does not keep as it is, or lacks.

    ``kept`` is the owner's ``state_dict()`` after loading ``state``: a key the owner ignores
    (``FedAvg {'m': ...}``) is missing from it, a value it converts (a step of ``1.5``) differs.
    ``fresh`` is the ``state_dict()`` of a fresh owner: each of its keys is written by every run,
    so a state without one is not what a run wrote. In a mapping of tensors (a state over the
    parameters), each name must be one of ``names`` (the model's shared parameters, or a module
    holding some), and a state over the parameters themselves names all of them.
    """
    if isinstance(state, Mapping):
        if not isinstance(kept, Mapping):
            return where, f"is a mapping, {owner} state has {_show(kept)} here"
        fresh = fresh if isinstance(fresh, Mapping) else {}
        for key in fresh:
            if key not in state:
                return f"{where}.{key}", f"is missing ({owner} state always has it)"
        over_parameters = bool(state) and all(isinstance(v, torch.Tensor) for v in state.values())
        for key, value in state.items():
            at = f"{where}.{key}"
            if key not in kept:
                return at, f"is not part of {owner} state (its keys: {sorted(map(str, kept))})"
            if over_parameters and names is not None and not _names_shared(key, names):
                return at, f"names no shared parameter of this model ({owner} state is kept per parameter)"
            if problem := kept_problem(value, kept[key], fresh.get(key), at, owner, names):
                return problem
        if over_parameters and names and set(state) <= names and set(state) != names:
            missing = sorted(names - set(state))
            return f"{where}.{missing[0]}", f"is missing ({owner} state holds every shared parameter)"
        return None
    if not same(state, kept):
        return where, f"is {_show(state)}, {owner} state keeps {_show(kept)}"
    return None


ROUND_COUNTERS = frozenset({"step", "rounds_done", "round_idx", "version"})
"""The fields of a strategy's state (and of a strategy it wraps) that count its server steps: one
per round at most (FedOpt's and FedAvgM's ``step``, FedBuff's ``version``, FedBiscuit's
``round_idx``, the wrappers' ``rounds_done``)."""


def counter_problem(state: Any, rounds: int, where: str) -> Problem | None:
    """A server-step counter of ``state`` (:data:`ROUND_COUNTERS`) past the ``rounds`` recorded."""
    if not isinstance(state, Mapping):
        return None
    for key, value in state.items():
        if key in ROUND_COUNTERS and not (_is_int(value) and 0 <= value <= rounds):
            return (
                f"{where}.{key}",
                f"is {_show(value)}, expected a count of server steps in [0, {rounds}] (the rounds recorded)",
            )
        if problem := counter_problem(value, rounds, f"{where}.{key}"):
            return problem
    return None
