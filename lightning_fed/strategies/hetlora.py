"""HetLoRA (Cho et al., 2024, "Heterogeneous LoRA for Federated Fine-tuning of On-Device
Foundation Models", EMNLP, arXiv:2401.06432).

Clients train LoRA adapters of different ranks. The server keeps the adapter at ``r_max``;
client ``k`` starts from its first ``r_k`` components (truncation). Aggregation pads every
client's factors with zeros up to ``r_max`` and averages ``A`` and ``B`` separately
(zero-padding aggregation), so a component only high-rank clients train is averaged with the
zeros of the others. Two refinements of the paper:

* **sparsity-weighted aggregation** (``weighting="sparsity"``): per LoRA module, client ``k``
  weighs ``||B_k A_k||_F`` (normalised over the round's clients) instead of ``|D_k|``, so a
  client whose update is small (sparse) moves the module less;
* **rank self-pruning** (:func:`rank_regularizer`, :func:`self_prune`): the local loss adds
  ``lambda * sum_modules ||B[:, g:]||_F ||A[g:]||_F`` with ``g = floor(gamma r_k)``, and a
  client whose penalty decreased since its previous round prunes to rank ``g``.

The paper is not in ``shared/papers``; the pruning rule and the per-module norm weights follow
the authors' description as summarised in the issue and public re-implementations, not a
checked equation number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from lightning_fed.state import StateDict, compute_dtype
from lightning_fed.strategies.base import ClientUpdate
from lightning_fed.strategies.fedavg import WEIGHTINGS
from lightning_fed.strategies.heterogeneous_rank import HeterogeneousRankLoRA
from lightning_fed.strategies.lora_factors import lora_pairs, lora_product, pad_rank, state_rank, truncate_rank

HETLORA_WEIGHTINGS = (*WEIGHTINGS, "sparsity")


def zero_padding_average(
    states: Sequence[Mapping[str, Tensor]], weights: Sequence[float], rank: int
) -> dict[str, tuple[Tensor, Tensor]]:
    """Per LoRA module, ``(A, B)``: the weighted mean of the factors zero-padded to ``rank``.

    Args:
        states: The clients' states (LoRA factors at their own ranks).
        weights: One non-negative weight per state (normalised here).
        rank: The rank to pad to (``r_max``).
    """
    total = float(sum(weights))
    out: dict[str, tuple[Tensor, Tensor]] = {}
    for module, (a_key, b_key) in lora_pairs(states[0]).items():
        acc_a = acc_b = None
        for state, w in zip(states, weights):
            padded = pad_rank({a_key: state[a_key], b_key: state[b_key]}, rank)
            a = padded[a_key].to(compute_dtype(padded[a_key].dtype)) * (float(w) / total)
            b = padded[b_key].to(compute_dtype(padded[b_key].dtype)) * (float(w) / total)
            acc_a = a if acc_a is None else acc_a + a
            acc_b = b if acc_b is None else acc_b + b
        out[module] = (acc_a, acc_b)
    return out


def sparsity_weights(states: Sequence[Mapping[str, Tensor]], a_key: str, b_key: str) -> list[float]:
    """``||B_k A_k||_F / sum_j ||B_j A_j||_F`` for one module (uniform if all products are zero)."""
    norms = [float(torch.linalg.matrix_norm(lora_product(s[a_key], s[b_key]))) for s in states]
    total = sum(norms)
    return [n / total for n in norms] if total > 0 else [1.0 / len(states)] * len(states)


def rank_regularizer(state: Mapping[str, Tensor], gamma: float) -> Tensor:
    """``sum_modules ||B[:, g:]||_F ||A[g:]||_F``, ``g = floor(gamma r)``: the self-pruning penalty (differentiable)."""
    if not 0.0 < gamma < 1.0:
        raise ValueError(f"`gamma` must be in (0, 1), got {gamma!r}")
    total = torch.zeros(())
    for a_key, b_key in lora_pairs(state).values():
        keep = math.floor(gamma * state[a_key].shape[0])
        total = total + state[a_key][keep:].norm() * state[b_key][:, keep:].norm()
    return total


def self_prune(state: Mapping[str, Tensor], gamma: float, previous: float | None) -> tuple[StateDict, int, float]:
    """Prune the client's adapter to ``max(1, floor(gamma r))`` if its penalty fell since last round.

    Args:
        state: The client's LoRA state after local training, at rank ``r``.
        gamma: The share of the rank kept when pruning, in ``(0, 1)``.
        previous: The penalty (:func:`rank_regularizer`) after the client's previous round,
            ``None`` on its first round (never prunes).

    Returns:
        ``(state, rank, penalty)``: the (possibly truncated) state to upload, its rank, and the
        penalty to remember for the next round (client state).
    """
    penalty = float(rank_regularizer({k: v.detach() for k, v in state.items()}, gamma))
    rank = state_rank(state)
    if previous is not None and penalty < previous and rank > 1:
        rank = max(1, math.floor(gamma * rank))
        return truncate_rank(state, rank), rank, penalty
    return dict(state), rank, penalty


class HetLoRA(HeterogeneousRankLoRA):
    """Zero-padding aggregation of heterogeneous-rank LoRA, with optional sparsity weights.

    Args:
        client_ranks: Each client's rank (see :class:`HeterogeneousRankLoRA`).
        weighting: ``"num_examples"``, ``"uniform"`` or ``"sparsity"`` (per module,
            ``||B_k A_k||_F``; the other shared keys then weigh uniformly).
    """

    def __init__(self, client_ranks: Sequence[int] | None = None, weighting: str = "num_examples") -> None:
        if weighting not in HETLORA_WEIGHTINGS:
            raise ValueError(f"`weighting` must be one of {set(HETLORA_WEIGHTINGS)}, got {weighting!r}")
        super().__init__(client_ranks, "uniform" if weighting == "sparsity" else weighting)
        self.sparsity = weighting == "sparsity"

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        self.check_ranks(global_state, updates)
        states = [u.state for u in updates]
        out = self.average_other_keys(global_state, updates)
        for module, (a_key, b_key) in lora_pairs(global_state).items():
            w = sparsity_weights(states, a_key, b_key) if self.sparsity else self.weights(updates)
            pair = [{a_key: s[a_key], b_key: s[b_key]} for s in states]
            a, b = zero_padding_average(pair, w, self.max_rank)[module]
            out[a_key], out[b_key] = a.to(global_state[a_key].dtype), b.to(global_state[b_key].dtype)
        return {k: out[k] for k in global_state}
