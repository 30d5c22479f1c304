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
         init_args: {choices: [4, 8, 16], probabilities: [0.34, 0.33, 0.33], seed: 0}  # or {column: rank}

The ranks are part of the strategy's ``state_dict`` (resume keeps them, and HetLoRA's pruned
ranks: the hook sets ranks only on a strategy that has none).

**A rank from a data column** (``column: <name>``): a client's rank is the value of that column
in its rows, which must be the same in all of them (a device tier written into each example).
The client is the side that knows it: its :class:`~lightning_fed.datamodules.ClientData` keeps
the raw values of the data's non-text columns (``columns``) when the text is tokenized. In process
the server holds every client's data, so the ranks are read when the run is bound to its data
(:meth:`ClientRanks.check_server`): a missing column or a client whose values differ is a one-line
error before anything is written. A Flower server holds no client data: before the first round it
asks every client for its rank (a query, answered from the client's own rows) and sets the ranks
from the replies; a bad column then fails the run at that query with the same one-line error.
Both give the same ranks, so the same config runs in both transports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_fed.federation.hooks import Capability, Payload, Replies, RoundHook
from lightning_fed.heterogeneity.rank_assignment import SECTION, RankAssignment
from lightning_fed.hook_rules import CLIENT_RANKS, ranks_above_problem
from lightning_fed.strategies.lora_factors import state_rank
from lightning_fed.value_rules import check

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.hooks import ServerRound


class ClientRanks(RoundHook):
    """Give each client its LoRA rank (a per-client list, a seeded draw from ``choices``, or a data column).

    Args:
        per_client: One rank per client, in client order.
        choices: Ranks to draw from, independently per client.
        probabilities: The probability of each of ``choices`` (uniform if omitted).
        seed: Seed of the draw.
        column: A column of the data whose value, the same in all of a client's rows, is that
            client's rank (read from each client's own data; see the module docstring).
    """

    #: It assigns the ranks on the server, before the round: nothing of it runs in a client's turn.
    capabilities = frozenset({Capability.BATCH_SAFE})

    def __init__(
        self,
        per_client: list[int] | None = None,
        choices: list[int] | None = None,
        probabilities: list[float] | None = None,
        seed: int = 0,
        column: str | None = None,
    ) -> None:
        check(CLIENT_RANKS, seed=seed)  # lightning_fed/hook_rules.py: the precheck's too
        self.assignment = RankAssignment(
            per_client=per_client, choices=choices, probabilities=probabilities, seed=seed, column=column
        )
        self.ranks: list[int] = []

    def check_run(self, run: Any) -> None:
        """The strategy takes client ranks (found from the ``federation:`` section, before the model loads)."""
        strategy = run.strategy
        if not callable(getattr(strategy, "set_client_ranks", None)):
            raise ValueError(
                f"{SECTION} needs a heterogeneous-rank strategy (HetLoRA, FlexLoRA, FLoRA),"
                f" got federation.strategy={type(strategy).__name__}"
            )

    def check_server(self, server: ServerRound) -> None:
        """Refuse a strategy without client ranks, ranks that do not fit the clients or exceed
        ``r_max`` (the module's LoRA rank), and (in process) a bad data column, when the run is
        bound: before anything is written."""
        self.check_run(server)
        column = self.assignment.column
        if column is None:
            self.ranks = self.assignment.ranks(server.num_clients)
        elif _set_up(server):
            clients = [server.datamodule.client(c) for c in range(server.num_clients)]
            for c, data in enumerate(clients):
                if column not in data.columns:
                    raise ValueError(self.assignment.missing_column(c, list(data.columns)))
            self.ranks = self.assignment.ranks(server.num_clients, [data.columns[column] for data in clients])
        # else under Flower: asked of the clients before the first round (client_queries)
        module = getattr(server, "module", None)
        if self.ranks and module is not None:
            self._check_max_rank(state_rank(module.shared_parameters()))

    def setup_server(self, server: ServerRound, context: RoundContext, module: pl.LightningModule) -> None:
        if self.assignment.column is None and not self.ranks:
            self.ranks = self.assignment.ranks(server.num_clients)
        if self.ranks:
            self._set(server)

    # --------------------------------------- a data column under Flower: the clients say their rank
    def client_queries(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> dict[int, Payload]:
        if self.assignment.column is None or self.ranks:
            return {}
        return {c: {"column": self.assignment.column} for c in range(server.num_clients)}

    def answer_query(
        self, module: pl.LightningModule, data: Any, client_id: int, round_idx: int, query: Payload
    ) -> Payload:
        columns = data.columns
        if query["column"] not in columns:
            return {"error": self.assignment.missing_column(client_id, list(columns))}
        try:
            return {"rank": self.assignment.column_rank(client_id, columns[query["column"]])}
        except ValueError as err:  # the server raises it: the client's own log is not the user's console
            return {"error": str(err)}

    def on_replies(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, replies: Replies
    ) -> None:
        for c in range(server.num_clients):
            reply = replies.answers.get(c)
            if reply is None:
                raise ValueError(f"{SECTION}.column={self.assignment.column!r}: client {c} did not report its rank")
            if "error" in reply:
                raise ValueError(reply["error"])
        self.ranks = [int(replies.answers[c]["rank"]) for c in range(server.num_clients)]
        self._set(server)

    def _check_max_rank(self, max_rank: int) -> None:
        a = self.assignment
        lists = {"per_client": a.per_client, "choices": a.choices, "probabilities": a.probabilities}
        if problem := ranks_above_problem(SECTION, lists, max_rank):  # hook_rules.py: the precheck's too
            raise ValueError(problem)
        too_high = [(c, r) for c, r in enumerate(self.ranks) if r > max_rank]
        if too_high:
            raise ValueError(
                f"{SECTION}: ranks above the global LoRA rank r_max={max_rank} (model.lora.r);"
                f" got (client, rank) {too_high[:5]}"
            )

    def _set(self, server: ServerRound) -> None:
        strategy = server.strategy
        self._check_max_rank(strategy.max_rank)
        if strategy.client_ranks is None:  # restored ranks (a resumed run, HetLoRA's pruned ranks) stay
            strategy.set_client_ranks(self.ranks)

    def summary(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for r in self.ranks:
            counts[str(r)] = counts.get(str(r), 0) + 1
        return {"clients_per_rank": dict(sorted(counts.items(), key=lambda kv: int(kv[0])))} if self.ranks else {}


def _set_up(server: ServerRound) -> bool:
    """Whether the server holds the clients' data (in process) rather than the config's module only."""
    datamodule = server.datamodule
    return datamodule is not None and bool(getattr(datamodule, "clients", None))
