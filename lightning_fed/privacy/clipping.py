"""L2 clipping of named tensors: the sensitivity bound every Gaussian mechanism here relies on.

A client's contribution (its update of the shared state, or one example's gradient) is one
vector made of several named tensors. It is clipped as a whole ("flat clipping", McMahan et
al., 2018, arXiv:1710.06963, Algorithm 1 ``ClipFn``): scaled by ``min(1, C / ||v||_2)`` where
``||v||_2`` is the norm of all its tensors together, so that adding or removing one
contributor moves the sum by at most ``C`` in L2 norm.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from lightning_fed.state import StateDict, compute_dtype


def global_norm(tensors: Mapping[str, Tensor]) -> float:
    """``sqrt(sum_k ||t_k||_2^2)`` over all the named tensors, in float32 or wider."""
    total = 0.0
    for t in tensors.values():
        total += float(t.detach().to(compute_dtype(t.dtype)).pow(2).sum())
    return total**0.5


def clip_to_norm(tensors: Mapping[str, Tensor], clip_norm: float) -> tuple[StateDict, float]:
    """Scale ``tensors`` by ``min(1, C / ||v||_2)`` (flat clipping).

    Args:
        tensors: The named tensors forming one vector ``v``.
        clip_norm: ``C`` (> 0).

    Returns:
        The clipped tensors (in float32 or wider) and the norm of ``v`` before clipping.
    """
    if not clip_norm > 0:
        raise ValueError(f"`clip_norm` must be > 0, got {clip_norm!r}")
    norm = global_norm(tensors)
    scale = min(1.0, clip_norm / norm) if norm > 0 else 1.0
    return {k: t.detach().to(compute_dtype(t.dtype)) * scale for k, t in tensors.items()}, norm


def per_example_clip_factors(per_example_norms: Tensor, clip_norm: float) -> Tensor:
    """``min(1, C / ||g_i||)`` for each example (``0 / 0`` counts as unclipped)."""
    if not clip_norm > 0:
        raise ValueError(f"`clip_norm` must be > 0, got {clip_norm!r}")
    return torch.where(
        per_example_norms > clip_norm,
        clip_norm / per_example_norms.clamp_min(1e-30),
        torch.ones_like(per_example_norms),
    )
