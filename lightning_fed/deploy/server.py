"""Our server strategy inside a Flower strategy, for real multi-machine runs.

:class:`FederatedServer` is a ``flwr.serverapp.strategy.Strategy`` built from the run's
:class:`~lightning_fed.federation.run.FederatedRun` (no Trainer). Its rounds follow the
in-process ``FederatedLoop`` exactly: the same clients are
sampled (a pure function of seed and round), each gets ``strategy.client_model`` and
``strategy.downlink``, replies are checked with
:func:`~lightning_fed.strategies.check_update`, a client whose node fails or times out is
left out, the round fails below ``min_clients``, and the strategy aggregates. Server round
hooks run here (with a :class:`~lightning_fed.federation.context.RoundContext`, as in process), through the same
:class:`~lightning_fed.federation.ServerRound` the in-process loop holds, built by the run
(``server.server``). The run's record is the same ``summary.json`` and TensorBoard scalars,
plus the final adapter folder.

A client is a partition of the data (``partition-id`` in the SuperNode's node config); the
server asks every node which partition it holds before the first round.

Replies are untrusted. A reply is bound to the node it came from (``src_node_id``, which the
SuperLink sets, authenticated when SuperNode authentication is on): a node answers only for
the client it holds, so a reply claiming another client's ``client-id`` is rejected and
counted, and the real client's reply still counts. A reply is also bound to the round and the
message it answers: it must name that message (``reply_to_message_id``) and echo the round and
the random nonce the message carried, so a reply replayed from an earlier round is refused with a
warning (the client then counts as failed, as one that never answered). Malformed replies (arrays that are not
floating point or do not match what was sent, extras the strategy did not ask for, metrics
that are not finite numbers, too many metric keys, ``num-examples`` above ``max_examples``)
are rejected with a warning: a train reply as a rejected update, an evaluate reply as a
rejected evaluation (``rejected_evaluations`` in ``summary.json``). None stops the run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result
from flwr.serverapp.strategy import Strategy as FlowerStrategy
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_fed.deploy.buffered_rounds import BufferedRounds, real_arrivals
from lightning_fed.deploy.queries import ask_clients
from lightning_fed.deploy.records import (
    ReplyLimits,
    check_binding,
    from_arrays,
    new_nonce,
    record_to_evaluation,
    record_to_update,
    to_arrays,
    train_instruction,
)
from lightning_fed.deploy.secure_aggregation import SecureAggregation
from lightning_fed.deploy.secure_aggregation_flower import secure_train_round
from lightning_fed.deploy.wall_clock import collect_until, wall_clock_hook
from lightning_fed.federation.context import RoundContext
from lightning_fed.federation.hooks import Payload, payload_nbytes, reads_client_data
from lightning_fed.federation.run import FederatedRun
from lightning_fed.heterogeneity.system_round import CUT_SHORT, SystemHeterogeneity
from lightning_fed.modules.base import FederatedModule
from lightning_fed.pipelines import flower_refusals
from lightning_fed.state import StateDict, clone_state
from lightning_fed.strategies.base import AggregationError, ClientUpdate

PARTITION_QUERY = "query.partition"


class FederatedServer(FlowerStrategy):
    """Runs a :class:`~lightning_fed.federation.run.FederatedRun`'s rounds over a Flower ``Grid``.

    Args:
        run: The run (the config's ``federation:`` section): its
            :meth:`~lightning_fed.federation.run.FederatedRun.server_round` (rounds, clients per
            round, strategy, hooks, seed, min_clients, privacy) runs the rounds here (``server.server``)
            and its :meth:`~lightning_fed.federation.run.FederatedRun.evaluation_plan` decides
            which clients evaluate (``server.evaluation``), as in process.
        module: The server's copy of the model: its shared parameters are the initial global
            state, round hooks work on it, and the final adapter is saved from it.
        num_clients: Number of data partitions (clients) in the federation.
        output_dir: Where ``summary.json``, TensorBoard events and the adapter go.
        timeout: Seconds to wait for a round's replies; a node that has not answered by then
            counts as a failed client.
        limits: Bounds on what a reply may claim (``num-examples``, number of metric keys).
        datamodule: The config's data module (not set up: the server never loads client data),
            as ``server.datamodule`` for the hooks.
    """

    def __init__(
        self,
        run: FederatedRun,
        module: FederatedModule,
        num_clients: int,
        output_dir: str | Path,
        timeout: float = 3600.0,
        limits: ReplyLimits | None = None,
        datamodule: Any = None,
    ) -> None:
        self.run, self.server, self.evaluation = run, run.server_round(), run.evaluation_plan()
        self.server.bind(num_clients, datamodule, module, engine="flower")  # plans the privacy budget too
        self.save_adapter = run.save_adapter
        self.module, self.num_clients, self.timeout = module, num_clients, timeout
        self.limits = limits or ReplyLimits()
        self.rejected_evaluations = self.missing_replies = 0
        #: Bytes of the hooks' evaluation instructions (not in the rounds' ``down_bytes``: the
        #: in-process loop evaluates on the server's own module and sends nothing).
        self.eval_down_bytes = 0
        self.context = RoundContext(
            rounds=self.server.rounds,
            seed=self.server.seed,
            log_dir=str(output_dir),
            loggers=[TensorBoardLogger(str(output_dir), name="", version="")],
            add_round_bytes=self.server.add_round_bytes,
            engine="flower",
        )
        self.nodes: dict[int, int] = {}  # client (partition) -> node id
        self.eval_asked: set[int] = set()  # clients asked to evaluate this round
        self.instructions: dict[int, dict[int, Payload]] = {}  # this round's per-client hook payloads
        self._asked: dict[int, tuple[Message, str]] = {}  # this round's message to each client, its nonce
        self.late: list[int] = []  # clients of the last train round with no reply

    # --------------------------------------------------------------- Flower's strategy API
    def summary(self) -> None:
        s = self.server
        rank_zero_info(
            f"FederatedServer: {type(s.strategy).__name__}, {s.rounds} rounds, {s.clients_per_round} of"
            f" {self.num_clients} clients per round, min_clients={s.min_clients}, seed={s.seed}"
        )

    def ask(self, hook_index: int, queries: dict[int, Payload]) -> dict[int, Payload]:
        """The transport of a hook's pre-round queries (:func:`~lightning_fed.deploy.queries.ask_clients`)."""
        replies, missing = ask_clients(
            self.grid, self.nodes, self.server, self.round_idx, hook_index, queries, self.timeout, self.limits
        )
        self.missing_replies += missing
        return replies

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One train message per sampled client, to the node holding its partition."""
        round_idx, server = server_round - 1, self.server
        self.round_idx, self.grid = round_idx, grid  # for the hooks' queries (:meth:`ask`)
        clients = server.sample(round_idx)
        server.prepare(self.context, self.module, round_idx, clients, self.ask)
        server.open(round_idx, clients)
        self._extras_layout: dict[int, dict[str, tuple[int, ...]]] = {}
        self.instructions, self._asked = {}, {}
        for cid in clients:
            if cid not in self.nodes:
                server.fail(cid)  # no node holds this partition
                continue
            self.instructions[cid] = server.client_instructions(cid, round_idx)
            start, downlink = server.send(cid)
            self._extras_layout[cid] = self._expected_extras(start, downlink)
            nonce = new_nonce()
            content = train_instruction(round_idx, cid, start, downlink, self.instructions[cid], nonce)
            message = Message(content=content, message_type=MessageType.TRAIN, dst_node_id=self.nodes[cid])
            self._asked[cid] = (message, nonce)
        return [message for message, _ in self._asked.values()]

    def _unbound(self, cid: int, msg: Message, round_idx: int) -> str | None:
        """Why ``msg`` does not answer this round's message to ``cid`` (``None``: it does).

        The reply must name the message it answers (``reply_to_message_id``, where the grid gave
        the message an id) and echo its round and nonce (:func:`~lightning_fed.deploy.records.check_binding`).
        """
        message, nonce = self._asked.get(cid, (None, None))
        if message is None:
            return "no message was sent to that client in this round"
        sent_id = message.metadata.message_id
        if sent_id and msg.metadata.reply_to_message_id != sent_id:
            return f"it answers message {msg.metadata.reply_to_message_id!r}, not {sent_id!r}"
        if msg.has_error():
            return None
        try:
            check_binding(msg.content, round_idx, cid, nonce)
        except ValueError as err:
            return str(err)
        return None

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message], silent_are_late: bool = False
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Check every reply, aggregate the valid ones, run the after-aggregate hooks.

        A client asked to train that did not answer counts as failed (a timed-out node), or, with
        ``silent_are_late`` (a wall-clock round cut at its deadline or target), as late: left out,
        not failed (:attr:`late`)."""
        server, answered = self.server, set()
        for msg in replies:
            cid = self._client_of(msg.metadata.src_node_id)
            if cid in answered or server.sent(cid) is None:
                rank_zero_warn(
                    f"round {server_round}: reply from node {msg.metadata.src_node_id} ignored:"
                    " it was not asked to train (or answered twice)"
                )
                continue
            unbound = self._unbound(cid, msg, server_round - 1)
            if unbound is not None:  # e.g. an earlier round's reply replayed: refused; no reply counts as failed
                rank_zero_warn(f"round {server_round}: reply for client {cid} refused: {unbound}")
                continue
            answered.add(cid)
            if msg.has_error():
                server.fail(cid)
                rank_zero_warn(f"round {server_round}: client {cid} failed and is left out: {msg.error.reason}")
                continue
            try:
                update = self._checked_update(cid, msg)
            except (AggregationError, ValueError) as err:
                server.reject(cid, str(err))
                continue
            server.receive(update)
        self.late = [c for c in server.clients if server.sent(c) is not None and c not in answered]
        for cid in [] if silent_are_late else self.late:
            server.fail(cid)  # no reply: timed out
        server.close(self.context, self.module)
        record = server.report.history[-1]
        counts = {k: len(record[k]) for k in ("aggregated", "failed", "rejected") if k in record}
        return to_arrays(server.global_state), MetricRecord(counts)

    def _checked_update(self, cid: int, msg: Message) -> ClientUpdate:
        """The update in ``msg`` from the node holding client ``cid``; ``ValueError`` unless well-formed.

        Beyond :func:`~lightning_fed.deploy.records.record_to_update` (floating-point arrays,
        bounded metrics) and :func:`~lightning_fed.strategies.check_update` (keys, shapes, finite
        values; :meth:`admit` runs it): the reply claims client ``cid``, the one its node holds,
        and its extras are exactly the names and shapes the strategy's client side uploads.
        """
        update = record_to_update(msg.content, self.limits, compressed=self.server.compressor is not None)
        if update.client_id != cid:
            raise ValueError(
                f"node {msg.metadata.src_node_id} holds client {cid} but its reply claims client-id={update.client_id}"
            )
        expected = self._extras_layout.get(cid, {})
        if update.extras.keys() != expected.keys():
            missing, unexpected = (
                sorted(expected.keys() - update.extras.keys()),
                sorted(update.extras.keys() - expected.keys()),
            )
            raise ValueError(
                f"client {cid}: extras do not match the strategy's (missing={missing[:5]}, unexpected={unexpected[:5]})"
            )
        bad = [
            f"{k}: {tuple(v.shape)} != {expected[k]}" for k, v in update.extras.items() if tuple(v.shape) != expected[k]
        ]
        if bad:
            raise ValueError(f"client {cid}: extras shape mismatch for {bad[:5]}")
        return update

    def _expected_extras(self, start: StateDict, downlink: StateDict) -> dict[str, tuple[int, ...]]:
        """Names and shapes of the extras a client of this strategy uploads (e.g. SCAFFOLD's
        ``control/<name>``), from a dry run of its client-side correction on a scratch memory."""
        try:
            extras = self.server.strategy.local_correction(start, downlink, {}).finish(start, 1, 1.0)
        except ValueError:
            return {}
        return {k: tuple(v.shape) for k, v in extras.items()}

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The clients of the run's evaluation plan (``federation.eval_clients``, the in-process
        loop's rule) that a node holds evaluate the new global state."""
        planned = self.evaluation.clients_for(self.server, server_round - 1)
        self.eval_asked = {cid for cid in planned if cid in self.nodes}
        self._asked = {}
        sent = 0
        for cid in sorted(self.eval_asked):
            nonce = new_nonce()
            instructions = self.evaluation_instructions(cid, server_round - 1)
            sent += sum(payload_nbytes(p) for p in instructions.values())
            start = self.server.client_start(cid)[0]
            content = train_instruction(server_round - 1, cid, start, {}, instructions, nonce=nonce)
            message = Message(content=content, message_type=MessageType.EVALUATE, dst_node_id=self.nodes[cid])
            self._asked[cid] = (message, nonce)
        self.eval_down_bytes += sent
        for logger in self.context.loggers if sent else []:
            logger.log_metrics({"comm/eval_down_bytes": float(sent)}, step=server_round)
        return [message for message, _ in self._asked.values()]

    def evaluation_instructions(self, client_id: int, round_idx: int) -> dict[int, Payload]:
        """Every hook's evaluation payload for ``client_id`` (by hook index; empty ones left out),
        e.g. FLoRA's merged base change: what the client's model needs beyond the global state."""
        out = {i: h.evaluation_instruction(self.server, client_id, round_idx) for i, h in enumerate(self.server.hooks)}
        return {i: p for i, p in out.items() if p}

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Average the evaluations of the clients asked; a malformed or impostor reply is rejected."""
        report = self.server.report
        report.start_eval()
        seen: set[int] = set()
        for msg in replies:
            cid = self._client_of(msg.metadata.src_node_id)
            if msg.has_error():
                rank_zero_warn(f"round {server_round}: evaluation of client {cid} failed: {msg.error.reason}")
                continue
            try:
                if cid in self.eval_asked and (unbound := self._unbound(cid, msg, server_round - 1)) is not None:
                    raise ValueError(unbound)
                claimed, count, means = record_to_evaluation(msg.content, self.limits)
                if claimed != cid or cid in seen or cid not in self.eval_asked:
                    raise ValueError(
                        f"node {msg.metadata.src_node_id} holds client {cid} but its reply claims"
                        f" client-id={claimed} (or was not asked)"
                    )
            except ValueError as err:
                self.rejected_evaluations += 1
                rank_zero_warn(f"round {server_round}: evaluation of client {cid} rejected: {err}")
                continue
            seen.add(cid)
            report.add_client_eval(cid, means, count)
        report.end_eval(self.context, None, round_number=server_round)
        last = report.history[-1].get("val") if report.history else None
        return MetricRecord({k: float(v) for k, v in last.items()}) if last else None

    # ------------------------------------------------------------------------- the run
    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord | None = None,
        num_rounds: int | None = None,
        timeout: float | None = None,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Any = None,
        min_nodes: int | None = None,
    ) -> Result:
        """Run every round; returns Flower's ``Result`` and writes the run's record."""
        server = self.server
        local = [type(h).__name__ for h in server.hooks if reads_client_data(h)]
        if local:
            raise ValueError(
                f"federation.hooks: {local[0]} cannot run under Flower: it reads client data on the server"
                " (it implements on_client_data; the Flower server holds no client data)"
            )
        if refused := flower_refusals(server.datamodule):  # e.g. FedBis RLFT: the server's own training
            raise ValueError(refused[0])
        if initial_arrays is not None:
            server.global_state = from_arrays(initial_arrays)
        if not server.global_state:
            server.global_state = clone_state(self.module.shared_parameters())
        server.strategy.setup(server.global_state, self.num_clients)
        timeout = self.timeout if timeout is None else timeout
        self.summary()
        buffered = real_arrivals(server.hooks)  # FedBuff in real arrival order: deploy/buffered_rounds.py
        for hook in server.hooks:
            hook.setup_server(server, self.context, self.module)
        wall = wall_clock_hook(server.hooks)
        if wall is not None and isinstance(server.strategy, SecureAggregation):
            raise ValueError(
                "federation.hooks: SystemHeterogeneity.clock='wall' cannot run with SecureAggregation"
                " (Flower's SecAgg+ workflow runs its own rounds and time-outs); use clock='virtual'"
            )
        self.nodes = discover_partitions(grid, min_nodes or 1, timeout, self.num_clients)
        if buffered is not None:
            result = BufferedRounds(self, buffered, grid, timeout).run(num_rounds or server.rounds)
            self.finish()
            return result
        result = Result()
        for server_round in range(1, (num_rounds or server.rounds) + 1):
            if isinstance(server.strategy, SecureAggregation):  # Flower's SecAgg+ workflow runs the exchange
                arrays, metrics = secure_train_round(self, server_round, grid, timeout)
            elif wall is not None:  # real time-outs: the round closes at its deadline or target
                arrays, metrics = self.wall_clock_round(server_round, grid, wall, timeout)
            else:
                replies = grid.send_and_receive(
                    self.configure_train(server_round, to_arrays(server.global_state), ConfigRecord(), grid),
                    timeout=timeout,
                )
                arrays, metrics = self.aggregate_train(server_round, replies)
            result.arrays, result.train_metrics_clientapp[server_round] = arrays, metrics
            if server.stopping:  # the next round would exceed the privacy budget
                rank_zero_warn(f"stopping: {server.stop_reason}")
            if not self.evaluation.evaluates(server_round):  # federation.eval_every
                if server.stopping:
                    break
                continue
            replies = grid.send_and_receive(
                self.configure_evaluate(server_round, arrays, ConfigRecord(), grid), timeout=timeout
            )
            evaluated = self.aggregate_evaluate(server_round, replies)
            if evaluated is not None:
                result.evaluate_metrics_clientapp[server_round] = evaluated
            if server.stopping:
                break
        self.finish()
        return result

    def wall_clock_round(
        self, server_round: int, grid: Grid, hook: SystemHeterogeneity, timeout: float
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """A train round on real time-outs (``deploy/wall_clock.py``): the first ``target`` replies
        within ``deadline`` seconds (else the transport's ``timeout``) are aggregated, the rest are late."""
        started = time.monotonic()
        messages = list(self.configure_train(server_round, to_arrays(self.server.global_state), ConfigRecord(), grid))
        wait = timeout if hook.deadline is None else hook.deadline
        kept, _surplus = collect_until(grid, messages, wait, hook.round_target)
        arrays, metrics = self.aggregate_train(server_round, kept, silent_are_late=True)
        record = self.server.report.history[-1]
        train = record.get("train", {})  # absent with private metrics: partial work is then not counted
        partial = [c for c in record["aggregated"] if train.get(str(c), {}).get(CUT_SHORT)]
        seconds = time.monotonic() - started
        hook.record_wall_round(self.context, server_round - 1, len(record["aggregated"]), partial, self.late, seconds)
        return arrays, metrics

    def finish(self) -> None:
        """Write the final adapter, the global state and ``summary.json``."""
        out = Path(self.context.default_root_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.module.load_state(self.server.global_state)
        if self.save_adapter:
            self.module.save_adapter(out / "adapter")
        torch.save(self.server.global_state, out / "global_state.pt")
        extra = {
            **self.server.fault_counts(),
            "rejected_evaluations": self.rejected_evaluations,
            "missing_replies": self.missing_replies,
            "evaluation_down_bytes": self.eval_down_bytes,
            "hooks": self.server.hook_summaries(),
            "privacy": self.server.privacy_section(),
            "engine": "flower",
        }
        self.server.report.write_summary(self.context, extra=extra)
        for logger in self.context.loggers:
            logger.finalize("success")

    def _client_of(self, node_id: int) -> int:
        return next((c for c, n in self.nodes.items() if n == node_id), -1)


def discover_partitions(grid: Grid, min_nodes: int, timeout: float, num_clients: int | None = None) -> dict[int, int]:
    """Ask every connected node which partition (client) it holds: ``{client: node}``.

    A node whose answer is malformed or names a partition outside ``[0, num_clients)`` is left
    out with a warning; two nodes claiming one partition is an error (which one is real?).
    """
    deadline = time.monotonic() + timeout
    while len(nodes := list(grid.get_node_ids())) < min_nodes:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"only {len(nodes)} SuperNodes connected within {timeout:.0f} s, need at least {min_nodes}"
            )
        time.sleep(0.5)
    queries = [
        Message(content=RecordDict(), message_type=f"{MessageType.QUERY}.partition", dst_node_id=n) for n in nodes
    ]
    out: dict[int, int] = {}
    for reply in grid.send_and_receive(queries, timeout=timeout):
        node = reply.metadata.src_node_id
        if reply.has_error():
            rank_zero_warn(f"node {node} did not say which partition it holds: {reply.error.reason}")
            continue
        record = reply.content.config_records.get("partition")
        cid = record.get("partition-id") if record is not None else None
        if (
            isinstance(cid, bool)
            or not isinstance(cid, int)
            or cid < 0
            or (num_clients is not None and cid >= num_clients)
        ):
            rank_zero_warn(
                f"node {node} is left out: its partition-id must be an integer in [0, {num_clients}), got {cid!r}"
            )
            continue
        if cid in out:
            raise RuntimeError(f"partition-id={cid} is held by two SuperNodes ({out[cid]} and {node})")
        out[cid] = node
    rank_zero_info(f"FederatedServer: {len(out)} SuperNodes hold partitions {sorted(out)}")
    return out
