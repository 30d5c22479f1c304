"""Flower's SecAgg+ driving our rounds: the server's workflow and the client's mod.

Flower 1.41 ships SecAgg+ only for the legacy strategy API: ``SecAggPlusWorkflow.__call__``
refuses any context that is not a ``LegacyContext``
(``flwr/server/workflow/secure_aggregation/secaggplus_workflow.py``, ``__call__``: "Expect a
LegacyContext"), its setup stage asks ``context.strategy.configure_fit`` (a legacy
``flwr.server.strategy.Strategy``) for ``(ClientProxy, FitIns)`` pairs, and its unmask stage
hands the revealed mean to ``context.strategy.aggregate_fit`` as every result's
``FitRes.parameters``. The client mod reads the reply of the wrapped handler as a legacy
``FitRes`` (``recorddict_to_fitres``: records ``fitres.parameters``, ``fitres.num_examples``,
``fitres.metrics``, ``fitres.status``). So, on the server, :func:`secure_train_round` runs the
unmodified workflow with a ``LegacyContext`` around our ServerApp's context and a small legacy
strategy (:class:`RoundAdapter`) that names the round's nodes and catches the mean;
:class:`RoundWorkflow` only swaps the fit instructions for our own train messages (start state,
downlink, hook instructions, round, client id, nonce: what every train message carries). On the
client, :func:`secure_train_mod` routes a train message that carries SecAgg+ configs through
``secaggplus_mod``; the train handler then replies with the client's contribution in the
``FitRes`` layout (:func:`contribution_reply`). Cryptography, masking and unmasking are all
Flower's; what travels up from a client in the collect stage is Flower's masked integer vector
(its arrays are cleared by the mod) and the ``fitres`` metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.common import Code, FitIns, FitRes, Parameters, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common.recorddict_compat import fitres_to_recorddict
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
from lightning_fed.deploy.secure_aggregation import NOISE_SHARE_KEY, SecureAggregation
from lightning_fed.strategies.base import ClientUpdate

if TYPE_CHECKING:
    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.server_round import ServerRound


class TrainRoundServer(Protocol):
    """What :func:`secure_train_round` uses of :class:`~lightning_fed.deploy.server.FederatedServer`
    (a Protocol: ``server.py`` calls this module, so this module does not import it)."""

    server: ServerRound
    context: RoundContext
    module: Any
    nodes: dict[int, int]

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid) -> Any: ...


#: The ``fitres.metrics`` keys a contribution reply echoes (the server checks them).
ROUND_KEY, CLIENT_KEY, NONCE_KEY = "lf-round", "lf-client-id", "lf-nonce"


def is_secure(message: Message) -> bool:
    """Whether ``message`` is a step of Flower's SecAgg+ protocol (it carries its configs)."""
    return message.metadata.message_type == MessageType.TRAIN and RECORD_KEY_CONFIGS in message.content.config_records


# ------------------------------------------------------------------------------ client side
def secure_train_mod(msg: Message, context: Context, call_next: Any) -> Message:
    """Run ``secaggplus_mod`` for SecAgg+ train messages; pass plain ones through.

    Flower's mod quantizes the handler's reply with numpy's global generator; the handler seeds
    it (:func:`contribution_reply`) so both transports round alike, and it is restored here.
    """
    if not is_secure(msg):
        return call_next(msg, context)
    # The mod pops its stage from the configs record: a transport hands each node its own copy of
    # a message, an in-process grid may share one content among nodes, so this node's is copied.
    records = dict(msg.content.items())
    records[RECORD_KEY_CONFIGS] = ConfigRecord(dict(msg.content.config_records[RECORD_KEY_CONFIGS]))
    msg.content = RecordDict(records)
    saved = np.random.get_state()
    try:
        return secaggplus_mod(msg, context, call_next)
    finally:
        np.random.set_state(saved)


def contribution_reply(
    strategy: SecureAggregation,
    received: dict[str, torch.Tensor],
    update: ClientUpdate,
    round_idx: int,
    nonce: str,
    downlink: dict[str, torch.Tensor] | None = None,
) -> RecordDict:
    """The client's contribution as the legacy ``FitRes`` that ``secaggplus_mod`` masks.

    Its metrics echo the round, client id and nonce of the message (the reply's binding); the
    numpy generator is left seeded with the client's rounding seed for the mod's quantization.
    """
    share = (downlink or {}).get(NOISE_SHARE_KEY)
    c = strategy.contribution(received, update, round_idx, None if share is None else float(share))
    metrics = {ROUND_KEY: round_idx, CLIENT_KEY: update.client_id, NONCE_KEY: nonce}
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(c.arrays), int(c.weight), metrics)
    np.random.seed(strategy.rounding_seed(round_idx, update.client_id))
    return fitres_to_recorddict(fitres, keep_input=False)


# ------------------------------------------------------------------------------ server side
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


def secure_train_round(server: TrainRoundServer, server_round: int, grid: Grid, timeout: float) -> tuple:
    """One training round of ``server`` through Flower's SecAgg+ (``server.server.strategy`` is a
    :class:`SecureAggregation`); returns what ``FederatedServer.aggregate_train`` returns."""
    rounds, strategy = server.server, server.server.strategy
    messages = list(server.configure_train(server_round, to_arrays(rounds.global_state), ConfigRecord(), grid))
    client_of = {node: cid for cid, node in server.nodes.items()}
    contents = {m.metadata.dst_node_id: m.content for m in messages}
    adapter = RoundAdapter(sorted(contents), grid, run_id=0)
    mean, contributors = None, []
    if len(contents) >= 2:  # SecAgg+ needs two clients at least
        strategy.check_capacity(len(contents))
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
            timeout=strategy.timeout if strategy.timeout is not None else timeout,
        )
        workflow(grid, context)
    else:
        rank_zero_warn(f"round {server_round}: secure aggregation needs 2 clients, {len(contents)} were sampled")
    for proxy, fitres in adapter.results or []:
        cid = client_of.get(proxy.node_id, -1)
        meta, sent = fitres.metrics, contents[proxy.node_id].config_records[CONFIG]
        if (meta.get(ROUND_KEY), meta.get(CLIENT_KEY), meta.get(NONCE_KEY)) != (server_round - 1, cid, sent["nonce"]):
            # Its masked vector is already in the sum: the round cannot leave it out.
            raise RuntimeError(
                f"round {server_round}: node {proxy.node_id} (client {cid}) answered for round"
                f" {meta.get(ROUND_KEY)} client {meta.get(CLIENT_KEY)} or another message: the secure sum is unusable"
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
    rounds.close(server.context, server.module)
    record = rounds.report.history[-1]
    counts = {k: len(record[k]) for k in ("aggregated", "failed", "rejected") if k in record}
    return to_arrays(rounds.global_state), MetricRecord(counts)
