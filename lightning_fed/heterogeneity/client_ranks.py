"""Heterogeneous LoRA ranks in a run: the round hook that gives each client its rank.

The global adapter is built at the module's LoRA rank ``r_max`` (``model.init_args.lora.r``);
:class:`ClientRanks` (a ``federation.hooks`` entry) draws or reads each client's rank
``r_k <= r_max`` once, on the server, and hands it to the heterogeneous-rank strategy
(:class:`~lightning_fed.strategies.HetLoRA`, :class:`~lightning_fed.strategies.FlexLoRA`,
:class:`~lightning_fed.strategies.FLoRA`). From then on the strategy's ``client_model(k, global)``
sends client ``k`` its rank-``r_k`` factors (the downlink bytes are those), the client trains them
zero-padded in its ``r_max`` module, which is exactly rank ``r_k`` training (see
:func:`~lightning_fed.strategies.lora_factors.match_rank`), and uploads them at ``r_k``; the
server checks the upload's shapes against what it sent. The client needs no setting of its own,
so the same config runs in process and under Flower.

.. code-block:: yaml

   federation:
     strategy: {class_path: lightning_fed.strategies.FlexLoRA}
     hooks:
       - class_path: lightning_fed.heterogeneity.ClientRanks
         init_args: {choices: [4, 8, 16], probabilities: [0.34, 0.33, 0.33], seed: 0}

The ranks are part of the strategy's ``state_dict`` (resume keeps them, and HetLoRA's pruned
ranks: the hook sets ranks only on a strategy that has none). The ``column`` source of
:class:`~lightning_fed.heterogeneity.RankAssignment` is not offered here: the tokenized client
data no longer holds the raw fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_fed.federation.hooks import RoundHook
from lightning_fed.heterogeneity.rank_assignment import SECTION, RankAssignment

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.hooks import ServerRound


class ClientRanks(RoundHook):
    """Give each client its LoRA rank (a per-client list, or a seeded draw from ``choices``).

    Args:
        per_client: One rank per client, in client order.
        choices: Ranks to draw from, independently per client.
        probabilities: The probability of each of ``choices`` (uniform if omitted).
        seed: Seed of the draw.
    """

    def __init__(
        self,
        per_client: list[int] | None = None,
        choices: list[int] | None = None,
        probabilities: list[float] | None = None,
        seed: int = 0,
    ) -> None:
        self.assignment = RankAssignment(per_client=per_client, choices=choices, probabilities=probabilities, seed=seed)
        self.ranks: list[int] = []

    def setup_server(self, server: ServerRound, context: RoundContext, module: pl.LightningModule) -> None:
        strategy = server.strategy
        if not callable(getattr(strategy, "set_client_ranks", None)):
            raise ValueError(
                f"federation.hooks: ClientRanks needs a heterogeneous-rank strategy (HetLoRA, FlexLoRA, FLoRA),"
                f" got federation.strategy={type(strategy).__name__}"
            )
        self.ranks = self.assignment.ranks(server.num_clients)
        max_rank = strategy.max_rank
        too_high = [(c, r) for c, r in enumerate(self.ranks) if r > max_rank]
        if too_high:
            raise ValueError(
                f"{SECTION}: ranks above the global LoRA rank r_max={max_rank} (model lora.r);"
                f" got (client, rank) {too_high[:5]}"
            )
        if strategy.client_ranks is None:  # restored ranks (a resumed run, HetLoRA's pruned ranks) stay
            strategy.set_client_ranks(self.ranks)

    def summary(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for r in self.ranks:
            counts[str(r)] = counts.get(str(r), 0) + 1
        return {"clients_per_rank": dict(sorted(counts.items(), key=lambda kv: int(kv[0])))} if self.ranks else {}
