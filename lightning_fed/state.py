"""Named state dicts: the unit everything in a federation exchanges.

A state is a ``dict[str, Tensor]`` keyed by parameter name (the global model, a client's
update, a strategy's moments, a client's personal parameters). These helpers copy, size and
zero states; the strategies, the round engine, the Flower transport and the benchmarks all
use them, so they live here rather than in any one of those packages.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

StateDict = dict[str, Tensor]


def state_nbytes(state: Mapping[str, Tensor]) -> int:
    """Bytes needed to send ``state`` over the wire (raw tensor payload)."""
    return sum(t.numel() * t.element_size() for t in state.values())


def clone_state(state: Mapping[str, Tensor]) -> StateDict:
    """A detached CPU copy of ``state``."""
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype aggregation math runs in for a state of ``dtype``: at least float32."""
    return torch.promote_types(dtype, torch.float32)


def zeros_like_state(state: Mapping[str, Tensor]) -> StateDict:
    """CPU zeros keyed like ``state``, in :func:`compute_dtype` (for server moments, controls)."""
    return {k: torch.zeros(v.shape, dtype=compute_dtype(v.dtype)) for k, v in state.items()}
