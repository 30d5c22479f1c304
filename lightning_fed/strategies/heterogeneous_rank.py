"""The family of heterogeneous-rank LoRA aggregators: what HetLoRA, FlexLoRA and FLoRA share.

The global state holds every LoRA pair at the largest rank ``r_max`` (the shape the loop
builds the global adapter with); client ``k`` trains rank ``r_k <= r_max`` and uploads its
factors at that rank. Each member decides how a rank-``r_k`` client starts
(:meth:`client_model`) and how factors of different ranks are combined (:meth:`aggregate`).
Shared keys that are not LoRA factors (heads, norms) are averaged as in FedAvg.

The loop must check an update's shapes against ``client_model(k, global)``, the state the
client started from, not against the global state (``check_update`` compares with the latter).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from lightning_fed.option_rules import HETEROGENEOUS_RANK, check
from lightning_fed.state import StateDict
from lightning_fed.strategies.base import AggregationError, ClientUpdate, Strategy, weighted_average
from lightning_fed.strategies.lora_factors import lora_keys, state_rank, truncate_rank


class HeterogeneousRankLoRA(Strategy):
    """Base of the aggregators for clients that train LoRA adapters of different ranks.

    Args:
        client_ranks: The rank ``r_k`` of each client (from
            :class:`~lightning_fed.heterogeneity.RankAssignment`); ``None`` until
            :meth:`set_client_ranks`, and then every client trains ``r_max``.
        weighting: ``"num_examples"`` (``|D_k|``, the papers' ``p_k = n_k / n``) or ``"uniform"``.
    """

    def __init__(self, client_ranks: Sequence[int] | None = None, weighting: str = "num_examples") -> None:
        check(HETEROGENEOUS_RANK, weighting=weighting)  # lightning_fed/option_rules.py
        self.weighting = weighting
        self.client_ranks = None if client_ranks is None else [int(r) for r in client_ranks]
        self.max_rank = 0

    def setup(self, global_state: Mapping[str, Tensor], num_clients: int) -> None:
        super().setup(global_state, num_clients)
        self.max_rank = state_rank(global_state)
        if self.client_ranks is not None:
            self.set_client_ranks(self.client_ranks)

    def set_client_ranks(self, ranks: Sequence[int]) -> None:
        """Set each client's rank; all must lie in ``[1, r_max]`` (the global adapter's rank).

        Before :meth:`setup` the ranks are only stored; :meth:`setup` checks them.
        """
        ranks = [int(r) for r in ranks]
        if not self.max_rank:
            self.client_ranks = ranks
            return
        if len(ranks) != self.num_clients:
            raise ValueError(f"{type(self).__name__}: {len(ranks)} client ranks for {self.num_clients} clients")
        bad = [(c, r) for c, r in enumerate(ranks) if not 0 < r <= self.max_rank]
        if bad:
            raise ValueError(
                f"{type(self).__name__}: client ranks must be in [1, {self.max_rank}] (the global LoRA rank);"
                f" got (client, rank) {bad[:5]}"
            )
        self.client_ranks = ranks

    def rank_of(self, client_id: int) -> int:
        """``r_k``: the client's rank, or ``r_max`` when no ranks were set."""
        return self.max_rank if self.client_ranks is None else self.client_ranks[client_id]

    def client_model(self, client_id: int, global_state: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
        """The global state truncated to the client's rank (HetLoRA's and FLoRA's distribution)."""
        rank = self.rank_of(client_id)
        return global_state if rank == self.max_rank else truncate_rank(global_state, rank)

    def weights(self, updates: Sequence[ClientUpdate]) -> list[float]:
        """The averaging weight of each update (unnormalised)."""
        if self.weighting == "uniform":
            return [1.0] * len(updates)
        return [float(u.num_examples) for u in updates]

    def check_ranks(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> None:
        """Every update holds the global keys, each LoRA pair at one rank ``<= r_max``."""
        if not updates:
            raise AggregationError(f"{type(self).__name__}: cannot aggregate zero updates")
        for u in updates:
            if set(u.state) != set(global_state):
                diff = sorted(set(u.state) ^ set(global_state))
                raise AggregationError(f"client {u.client_id}: update keys do not match the global state {diff[:5]}")
            try:
                rank = state_rank(u.state)
            except ValueError as err:
                raise AggregationError(f"client {u.client_id}: {err}") from err
            if rank > self.max_rank:
                raise AggregationError(f"client {u.client_id}: rank {rank} exceeds the global rank {self.max_rank}")

    def average_other_keys(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """The weighted mean of the shared keys that are not LoRA factors, in their global dtype."""
        others = [k for k in global_state if k not in lora_keys(global_state)]
        if not others:
            return {}
        avg = weighted_average([{k: u.state[k] for k in others} for u in updates], self.weights(updates))
        return {k: v.to(global_state[k].dtype) for k, v in avg.items()}

    @abstractmethod
    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """The next global state at rank ``r_max``."""

    def state_dict(self) -> dict[str, Any]:
        return {"client_ranks": self.client_ranks}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        ranks = state.get("client_ranks", self.client_ranks)
        self.client_ranks = None if ranks is None else [int(r) for r in ranks]
