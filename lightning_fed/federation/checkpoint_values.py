"""The values inside a checkpoint, as the checks read them: every tensor by its path, the first
non-finite one, the first weight beyond any trained one, and a value shown in one line.

Shared by the checks of each part (:mod:`~lightning_fed.federation.checkpoint_check`,
:mod:`~lightning_fed.federation.checkpoint_loops`); a problem is ``(part, what is wrong)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch

MAX_WEIGHT = 1e6
"""The largest magnitude of a weight a checkpoint may hand the run. No run of this package trains
a LoRA or head weight near it (they stay below ~10); far below float32's 3.4e38, it keeps the
squared norms of updates (sums over up to ~1e9 entries) finite, so a weight past it is damage, not
training: with ``3e38`` every update's norm overflowed and every update was rejected."""

Problem = tuple[str, str]
"""``(part, what is wrong)``: ``("federation.report.rounds", "is -1, expected ...")``."""


def kind(value: Any) -> str:
    """The type's name: ``a list``, ``a Tensor``."""
    return type(value).__name__


def show(value: Any) -> str:
    """``value`` for a one-line message: a tensor by its shape, anything else by a short repr."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


def is_int(value: Any) -> bool:
    """An ``int`` and not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def tensors(value: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor inside nested mappings/lists, with its path (``"strategy.momentum['w']"``)."""
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from tensors(v, f"{prefix}[{i}]")


def non_finite(value: Any, prefix: str) -> Problem | None:
    """The first tensor (or float) inside ``value`` holding NaN or infinity."""
    for where, t in tensors(value, prefix):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return where, "has NaN or infinite values"
    for where, x in _floats(value, prefix):
        if not math.isfinite(x):
            return where, f"is {x}, expected a finite number"
    return None


def _floats(value: Any, prefix: str) -> Iterator[tuple[str, float]]:
    if isinstance(value, float):
        yield prefix, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _floats(v, f"{prefix}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _floats(v, f"{prefix}[{i}]")


def too_large(state: Any, prefix: str) -> Problem | None:
    """The first floating-point tensor of ``state`` with a value beyond :data:`MAX_WEIGHT`."""
    for where, t in tensors(state, prefix):
        if t.is_floating_point() and t.numel() and bool(torch.isfinite(t).all()):
            peak = float(t.abs().max())
            if peak > MAX_WEIGHT:
                return where, f"holds {peak:.3g}, beyond any trained weight (at most {MAX_WEIGHT:g})"
    return None
