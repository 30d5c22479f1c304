"""LoRA factors of different ranks in a named state: pairing, truncating, padding, products.

PEFT names a LoRA module's factors ``<module>.lora_A.<adapter>.weight`` with shape
``(r, in)`` and ``<module>.lora_B.<adapter>.weight`` with shape ``(out, r)``; the module adds
``s * B A`` to the frozen weight (``s = alpha / r``). The heterogeneous-rank strategies
(:class:`~lightning_fed.strategies.HetLoRA`, :class:`~lightning_fed.strategies.FlexLoRA`,
:class:`~lightning_fed.strategies.FLoRA`) work on the pairs these helpers find and assume one
scaling ``s`` for every client (see :func:`~lightning_fed.heterogeneity.alpha_for_rank`),
so that ``B A`` means the same weight change whatever the rank.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from lightning_fed.state import StateDict, compute_dtype

A_TAG, B_TAG = ".lora_A.", ".lora_B."


def lora_pairs(state: Mapping[str, Tensor]) -> dict[str, tuple[str, str]]:
    """``{module: (A key, B key)}`` for every LoRA pair in ``state``.

    Raises:
        ValueError: If a factor's partner is missing (a state that cannot be a LoRA adapter).
    """
    pairs: dict[str, tuple[str, str]] = {}
    for key in state:
        if A_TAG in key:
            b_key = key.replace(A_TAG, B_TAG, 1)
            if b_key not in state:
                raise ValueError(f"LoRA factor {key} has no partner {b_key}")
            pairs[key.split(A_TAG, 1)[0]] = (key, b_key)
        elif B_TAG in key and key.replace(B_TAG, A_TAG, 1) not in state:
            raise ValueError(f"LoRA factor {key} has no partner {key.replace(B_TAG, A_TAG, 1)}")
    return pairs


def lora_keys(state: Mapping[str, Tensor]) -> set[str]:
    """The keys of ``state`` that are LoRA factors (the other shared keys are averaged as usual)."""
    return {k for pair in lora_pairs(state).values() for k in pair}


def state_rank(state: Mapping[str, Tensor]) -> int:
    """The LoRA rank of ``state`` (the rows of its A factors); one rank per client.

    Raises:
        ValueError: If ``state`` holds no LoRA pair or its factors disagree on the rank.
    """
    ranks = {state[a].shape[0] for a, b in lora_pairs(state).values()} | {
        state[b].shape[1] for a, b in lora_pairs(state).values()
    }
    if len(ranks) != 1:
        raise ValueError(f"expected one LoRA rank in the state, found {sorted(ranks) or 'none'}")
    return ranks.pop()


def truncate_rank(state: Mapping[str, Tensor], rank: int) -> StateDict:
    """The first ``rank`` components of every LoRA pair (``A[:r]``, ``B[:, :r]``); other keys as is."""
    out: StateDict = dict(state)
    for a_key, b_key in lora_pairs(state).values():
        if rank > state[a_key].shape[0]:
            raise ValueError(f"cannot truncate {a_key} of rank {state[a_key].shape[0]} to rank {rank}")
        out[a_key] = state[a_key][:rank].clone()
        out[b_key] = state[b_key][:, :rank].clone()
    return out


def pad_rank(state: Mapping[str, Tensor], rank: int) -> StateDict:
    """Every LoRA pair zero-padded to ``rank`` components (HetLoRA's padding); other keys as is."""
    out: StateDict = dict(state)
    for a_key, b_key in lora_pairs(state).values():
        a, b = state[a_key], state[b_key]
        extra = rank - a.shape[0]
        if extra < 0:
            raise ValueError(f"cannot pad {a_key} of rank {a.shape[0]} down to rank {rank}")
        out[a_key] = torch.cat([a, a.new_zeros(extra, a.shape[1])], dim=0)
        out[b_key] = torch.cat([b, b.new_zeros(b.shape[0], extra)], dim=1)
    return out


def lora_product(a: Tensor, b: Tensor) -> Tensor:
    """``B A``, the full-size ``(out, in)`` weight change of one module (without the scaling ``s``)."""
    dtype = torch.promote_types(compute_dtype(a.dtype), compute_dtype(b.dtype))
    return b.to(dtype) @ a.to(dtype)


def svd_factors(product: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """The best rank-``rank`` factors of ``product`` (Eckart-Young), split evenly.

    ``product = U S V^T``; returns ``A = sqrt(S_r) V_r^T`` ``(rank, in)`` and ``B = U_r sqrt(S_r)``
    ``(out, rank)``, so ``B A`` is the truncated SVD (exactly ``product`` when its rank is at most
    ``rank``). A ``rank`` above ``min(out, in)`` pads with zero components.
    """
    u, s, vh = torch.linalg.svd(product.to(compute_dtype(product.dtype)), full_matrices=False)
    k = min(rank, s.numel())
    root = s[:k].sqrt()
    a = root[:, None] * vh[:k]
    b = u[:, :k] * root[None, :]
    if k < rank:
        a = torch.cat([a, a.new_zeros(rank - k, a.shape[1])], dim=0)
        b = torch.cat([b, b.new_zeros(b.shape[0], rank - k)], dim=1)
    return a, b


def match_rank(state: Mapping[str, Tensor], like: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
    """``state`` with every LoRA pair padded with zeros or truncated to the rank of ``like``'s.

    How a client trains rank ``r_k`` in a module built at ``r_max`` (both transports): the start
    state at ``r_k`` is zero-padded to ``r_max`` before it is loaded, and the trained state is
    truncated back to ``r_k`` before upload. The padding stays exactly zero while training: the
    gradient of ``B[:, j]`` is proportional to ``A[j] x = 0`` and that of ``A[j]`` to ``B[:, j] = 0``,
    so SGD/Adam(W) steps (zero gradient, zero weight) leave it at zero, and PEFT's scaling
    ``alpha / r_max`` equals :func:`~lightning_fed.heterogeneity.alpha_for_rank`'s ``alpha_r / r_k``.
    The module is then, step for step, the rank-``r_k`` adapter ``LoraConfig(r=r_k,
    lora_alpha=alpha_r)`` (its memory and compute are ``r_max``'s). Keys whose shapes already
    agree, or that are not LoRA factors, are returned as they are (``state`` itself if nothing differs).
    """
    if all(k not in like or like[k].shape == v.shape for k, v in state.items()):
        return state
    out: StateDict = dict(state)
    for a_key, b_key in lora_pairs(state).values():
        if a_key not in like or b_key not in like:
            continue
        have, want = state[a_key].shape[0], like[a_key].shape[0]
        pair = {a_key: state[a_key], b_key: state[b_key]}
        if have < want:
            out.update(pad_rank(pair, want))
        elif have > want:
            out.update(truncate_rank(pair, want))
    return out
