"""The SecAgg+ train round: Flower's ``SecAggPlusWorkflow`` runs the exchange, our strategy steps on
the securely computed mean.

Flower 1.41 ships SecAgg+ only for the legacy strategy API: ``SecAggPlusWorkflow.__call__``
refuses any context that is not a ``LegacyContext``
(``flwr/server/workflow/secure_aggregation/secaggplus_workflow.py``, ``__call__``: "Expect a
LegacyContext"), its setup stage asks ``context.strategy.configure_fit`` (a legacy
``flwr.server.strategy.Strategy``) for ``(ClientProxy, FitIns)`` pairs, and its unmask stage
hands the revealed mean to ``context.strategy.aggregate_fit`` as every result's
``FitRes.parameters``. So :class:`SecureRound` runs the unmodified workflow with a
``LegacyContext`` around a scratch context and a small legacy strategy (:class:`RoundAdapter`)
that names the round's nodes and catches the mean; :class:`RoundWorkflow` only swaps the fit
instructions for our own train messages (start state, downlink, hook instructions, round, client
id, nonce: what every train message carries). The client's half is
:mod:`lightning_fed.deploy.secure_aggregation_flower`. Chosen when the run's strategy is a
:class:`~lightning_fed.deploy.secure_aggregation.SecureAggregation`
(:func:`~lightning_fed.deploy.train_rounds.choose_train_round`).
"""

from __future__ import annotations

from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from flwr.common import FitIns, FitRes, Parameters, parameters_to_ndarrays
from flwr.server.client_manager import SimpleClientManager
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import Strategy as LegacyStrategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.serverapp import Grid
from lightning.pytorch.utilities import rank_zero_warn

from lightning_fed.deploy.records import CONFIG, to_arrays
from lightning_fed.deploy.secure_aggregation_flower import CLIENT_KEY, NONCE_KEY, ROUND_KEY
from lightning_fed.deploy.train_rounds.protocol import TrainRound
from lightning_fed.strategies.base import ClientUpdate


class RoundAdapter(LegacyStrategy):
    """The legacy strategy ``SecAggPlusWorkflow`` asks for one round: it names the round's nodes
    and keeps the results of the unmask stage (the mean, and who contributed)."""

    def __init__(self, node_ids: list[int], grid: Grid, run_id: int) -> None:
        self.proxies = [GridClientProxy(n, grid, run_id) for n in node_ids]
        self.results: list[tuple[Any, FitRes]] | None = None

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: Any) -> list:
        return [(p, FitIns(Parameters([], ""), {})) for p in self.proxies]  # replaced by RoundWorkflow

    def aggregate_fit(self, server_round: int, results: list, failures: list) -> tuple[None, dict]:
        self.results = list(results)
        return None, {}  # the run's own strategy steps on the mean

    def initialize_parameters(self, client_manager: Any) -> None:
        return None

    def configure_evaluate(self, server_round: int, parameters: Parameters, client_manager: Any) -> list:
        return []

    def aggregate_evaluate(self, server_round: int, results: list, failures: list) -> tuple[None, dict]:
        return None, {}

    def evaluate(self, server_round: int, parameters: Parameters) -> None:
        return None


class RoundWorkflow(SecAggPlusWorkflow):
    """Flower's workflow, with our train message content in place of legacy ``FitIns``."""

    def __init__(self, contents: dict[int, RecordDict], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.contents = contents

    def setup_stage(self, grid: Grid, context: LegacyContext, state: Any) -> bool:
        ok = super().setup_stage(grid, context, state)
        state.nid_to_fitins = {nid: self.contents[nid] for nid in state.nid_to_fitins}
        return ok


class SecureRound(TrainRound):
    """One train round through Flower's SecAgg+ (the run's strategy is a ``SecureAggregation``)."""

    def run(self, round_idx: int) -> None:
        fed, rounds, server_round = self.fed, self.server, round_idx + 1
        strategy = rounds.strategy
        messages = list(fed.configure_train(server_round, to_arrays(rounds.global_state), ConfigRecord(), self.grid))
        client_of = {node: cid for cid, node in fed.nodes.items()}
        contents = {m.metadata.dst_node_id: m.content for m in messages}
        adapter = RoundAdapter(sorted(contents), self.grid, run_id=0)
        if len(contents) >= 2:  # SecAgg+ needs two clients at least
            strategy.check_capacity(len(contents))
            self._workflow(adapter, contents, server_round)
        else:
            rank_zero_warn(f"round {server_round}: secure aggregation needs 2 clients, {len(contents)} were sampled")
        mean, contributors = None, []
        for proxy, fitres in adapter.results or []:
            cid = client_of.get(proxy.node_id, -1)
            meta, sent = fitres.metrics, contents[proxy.node_id].config_records[CONFIG]
            if (meta.get(ROUND_KEY), meta.get(CLIENT_KEY), meta.get(NONCE_KEY)) != (round_idx, cid, sent["nonce"]):
                # Its masked vector is already in the sum: the round cannot leave it out.
                raise RuntimeError(
                    f"round {server_round}: node {proxy.node_id} (client {cid}) answered for round"
                    f" {meta.get(ROUND_KEY)} client {meta.get(CLIENT_KEY)} or another message:"
                    " the secure sum is unusable"
                )
            mean = parameters_to_ndarrays(fitres.parameters)
            contributors.append((cid, fitres.num_examples))
        answered = {cid for cid, _ in contributors}
        for cid in [c for c in rounds.clients if rounds.sent(c) is not None and c not in answered]:
            rounds.fail(cid)  # dropped out, or the protocol halted
        if mean is not None:
            strategy.use_received(mean, [cid for cid, _ in contributors])
            for cid, weight in contributors:  # the clients' states are not known: each counts as ``x + mean``
                rounds.receive(ClientUpdate(cid, max(int(weight), 1), dict(rounds.sent(cid))))
        rounds.close(fed.context, fed.module)

    def _workflow(self, adapter: RoundAdapter, contents: dict[int, RecordDict], server_round: int) -> None:
        """Flower's SecAgg+ workflow over ``contents`` (node -> train message content); the
        revealed mean lands in ``adapter.results``."""
        strategy = self.server.strategy
        # The workflow keeps its round in the context's state only: a scratch context per round.
        scratch = Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={})
        context = LegacyContext(scratch, strategy=adapter, client_manager=SimpleClientManager())
        context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: server_round})
        context.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
        workflow = RoundWorkflow(
            contents,
            num_shares=strategy.num_shares,
            reconstruction_threshold=strategy.reconstruction_threshold,
            max_weight=strategy.max_weight,
            clipping_range=strategy.clipping_range,
            quantization_range=strategy.quantization_range,
            modulus_range=strategy.modulus_range,
            timeout=strategy.timeout if strategy.timeout is not None else self.timeout,
        )
        workflow(self.grid, context)
