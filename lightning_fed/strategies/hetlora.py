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

from lightning_fed.option_rules import HETLORA, check, hetlora_problem
from lightning_fed.state import StateDict, compute_dtype
from lightning_fed.strategies.base import ClientUpdate, LocalCorrection
from lightning_fed.strategies.heterogeneous_rank import HeterogeneousRankLoRA
from lightning_fed.strategies.lora_factors import lora_pairs, lora_product, pad_rank, state_rank, truncate_rank


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


#: Client memory / upload extras of self-pruning: the penalty after the last round, the rank kept.
PENALTY_KEY, RANK_KEY = "hetlora/penalty", "hetlora/rank"


class SelfPruning(LocalCorrection):
    """HetLoRA's client side: the rank penalty's gradient on every step, the pruning decision at the end.

    The client trains the rank ``r`` it received (its start state's rank). Each optimizer step
    adds ``lambda * d/dtheta sum_modules ||B[:, g:r]||_F ||A[g:r]||_F`` (``g = floor(gamma r)``)
    to the gradients (:func:`rank_regularizer`; ``d|a||b| / da = |b| a / |a|``). At the end,
    :func:`self_prune` against the penalty kept from the client's previous round: a client whose
    penalty fell zeroes its components past ``max(1, floor(gamma r))`` in the state it uploads (the
    zero-padding average treats those zeros as the truncated factors), and reports the rank it
    kept as the extra ``hetlora/rank``; the server then sends it that rank from the next round on.
    :meth:`finish` changes the uploaded state in place (the only way a correction can prune it).
    """

    def __init__(self, rank: int, penalty: float, gamma: float, memory: dict[str, Tensor]) -> None:
        self.rank, self.penalty, self.gamma, self.memory = rank, penalty, gamma, memory

    def correct_gradients(self, params: Mapping[str, torch.nn.Parameter]) -> None:
        if self.penalty <= 0:
            return
        keep = math.floor(self.gamma * self.rank)
        for a_key, b_key in lora_pairs(params).values():
            a, b = params[a_key], params[b_key]
            if a.grad is None or b.grad is None:
                continue
            ta, tb = a.detach()[keep : self.rank], b.detach()[:, keep : self.rank]
            na, nb = ta.norm(), tb.norm()
            if na > 0 and nb > 0:
                a.grad[keep : self.rank] += self.penalty * nb * ta / na
                b.grad[:, keep : self.rank] += self.penalty * na * tb / nb

    def finish(self, params: Mapping[str, Tensor], num_steps: int, lr: float) -> StateDict:
        previous = self.memory.get(PENALTY_KEY)
        _, rank, penalty = self_prune(
            truncate_rank(params, self.rank), self.gamma, None if previous is None else float(previous)
        )
        for a_key, b_key in lora_pairs(params).values():  # pruned: zero past the kept rank
            params[a_key][rank:] = 0
            params[b_key][:, rank:] = 0
        self.memory[PENALTY_KEY] = torch.tensor(penalty)
        self.memory[RANK_KEY] = torch.tensor(rank)
        return {RANK_KEY: torch.tensor([float(rank)])}


class HetLoRA(HeterogeneousRankLoRA):
    """Zero-padding aggregation of heterogeneous-rank LoRA, with optional sparsity weights and
    rank self-pruning.

    Args:
        client_ranks: Each client's rank (see :class:`HeterogeneousRankLoRA`).
        weighting: ``"num_examples"``, ``"uniform"`` or ``"sparsity"`` (per module,
            ``||B_k A_k||_F``; the other shared keys then weigh uniformly).
        prune_gamma: Self-pruning (:class:`SelfPruning`): the share of the rank a pruning client
            keeps, in ``(0, 1)``; ``None``: clients never prune.
        rank_penalty: ``lambda``, the weight of the rank penalty in the local loss (with ``prune_gamma``).
    """

    def __init__(
        self,
        client_ranks: Sequence[int] | None = None,
        weighting: str = "num_examples",
        prune_gamma: float | None = None,
        rank_penalty: float = 0.0,
    ) -> None:
        check(HETLORA, weighting=weighting, prune_gamma=prune_gamma, rank_penalty=rank_penalty)
        if problem := hetlora_problem({"prune_gamma": prune_gamma, "rank_penalty": rank_penalty}):
            raise ValueError(problem)
        super().__init__(client_ranks, "uniform" if weighting == "sparsity" else weighting)
        self.sparsity = weighting == "sparsity"
        self.prune_gamma, self.rank_penalty = prune_gamma, float(rank_penalty)

    def local_correction(
        self, global_state: Mapping[str, Tensor], downlink: Mapping[str, Tensor], client_memory: dict[str, Tensor]
    ) -> LocalCorrection:
        if self.prune_gamma is None:
            return LocalCorrection()
        return SelfPruning(state_rank(global_state), self.rank_penalty, self.prune_gamma, client_memory)

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        self.check_ranks(global_state, updates)
        pruned = {u.client_id: int(u.extras[RANK_KEY].item()) for u in updates if RANK_KEY in u.extras}
        if pruned:  # a pruning client gets its kept rank from the next round on
            ranks = self.client_ranks or [self.max_rank] * self.num_clients
            self.client_ranks = [min(r, pruned.get(c, r)) if pruned.get(c, 0) >= 1 else r for c, r in enumerate(ranks)]
        states = [u.state for u in updates]
        out = self.average_other_keys(global_state, updates)
        for module, (a_key, b_key) in lora_pairs(global_state).items():
            w = sparsity_weights(states, a_key, b_key) if self.sparsity else self.weights(updates)
            pair = [{a_key: s[a_key], b_key: s[b_key]} for s in states]
            a, b = zero_padding_average(pair, w, self.max_rank)[module]
            out[a_key], out[b_key] = a.to(global_state[a_key].dtype), b.to(global_state[b_key].dtype)
        return {k: out[k] for k in global_state}
