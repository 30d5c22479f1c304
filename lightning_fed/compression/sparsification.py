"""Top-k sparsification of an update: the ``k`` largest-magnitude values and their positions.

Per tensor, ``k = max(1, ceil(fraction * n))`` of its ``n`` values are kept (Aji & Heafield,
2017, arXiv:1704.05021; Stich et al., 2018, "Sparsified SGD with Memory", arXiv:1809.07599,
which adds the error feedback of :class:`~lightning_fed.compression.compressor.UpdateCompressor`).
Ties in magnitude go to the lower position (a stable sort), so the choice is deterministic.

What travels per tensor: ``k`` float32 values, ``k`` int32 flat positions and the shape
(8 bytes a dimension): ``8 k + 8 ndim`` bytes against ``4 n`` for float32.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lightning_fed.state import StateDict

VALUES, INDICES, SHAPE = "values", "indices", "shape"


def topk_count(numel: int, fraction: float) -> int:
    """``k = max(1, ceil(fraction * n))`` (0 for an empty tensor)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"`fraction` must be in (0, 1], got {fraction!r}")
    return min(numel, max(1, math.ceil(fraction * numel)))


def topk_sparsify(x: Tensor, fraction: float) -> StateDict:
    """Keep the ``k`` largest ``|x_i|`` of ``x`` (see :func:`topk_count`).

    Returns:
        ``{"values": float32 (k,), "indices": int32 (k,) flat positions, ascending, "shape": int64}``.
    """
    if x.numel() >= 2**31:
        raise ValueError(f"top-k positions are int32: a tensor of {x.numel()} values is too large")
    flat = x.detach().reshape(-1).to(torch.float32)
    k = topk_count(flat.numel(), fraction)
    order = torch.sort(flat.abs(), descending=True, stable=True).indices[:k]
    indices = order.sort().values
    return {
        VALUES: flat[indices],
        INDICES: indices.to(torch.int32),
        SHAPE: torch.tensor(list(x.shape), dtype=torch.int64),
    }


def densify(parts: StateDict) -> Tensor:
    """The float32 tensor with ``values`` at ``indices`` and zeros elsewhere."""
    shape = [int(s) for s in parts[SHAPE].tolist()]
    flat = torch.zeros(math.prod(shape), dtype=torch.float32)
    flat[parts[INDICES].to(torch.int64)] = parts[VALUES].to(torch.float32)
    return flat.reshape(shape)


def sparse_nbytes(numel: int, ndim: int, fraction: float) -> int:
    """Bytes :func:`topk_sparsify` sends for a tensor of ``numel`` values and ``ndim`` dimensions."""
    return 8 * topk_count(numel, fraction) + 8 * ndim
