"""Our server strategy inside a Flower strategy, for real multi-machine runs.

:class:`FederatedServer` is a ``flwr.serverapp.strategy.Strategy`` built from the run's
:class:`~lightning_fed.run.FederatedRun` (no Trainer). Its rounds follow the
in-process ``FederatedLoop`` exactly: the same clients are
sampled (a pure function of seed and round), each gets ``strategy.client_model`` and
``strategy.downlink``, replies are checked with
:func:`~lightning_fed.strategies.check_update`, a client whose node fails or times out is
left out, the round fails below ``min_clients``, and the strategy aggregates. Server round
hooks run here (with a :class:`~lightning_fed.federation.context.RoundContext`, as in process), through the same
:class:`~lightning_fed.federation.ServerRound` the in-process loop holds, built by the run
(``server.server``). The run's record is the same ``summary.json`` and TensorBoard scalars,
plus the final adapter folder.

One outer loop (:meth:`FederatedServer.start`) runs every round; how a round's train messages go
out and its replies come back is the run's train-round path
(:mod:`lightning_fed.deploy.train_rounds`: plain, SecAgg+, wall clock, buffered), chosen once by
:func:`~lightning_fed.deploy.train_rounds.choose_train_round`, which also refuses, in one line and
before anything is sent or written, a run the Flower server cannot run.

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

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result
from flwr.serverapp.strategy import Strategy as FlowerStrategy
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_fed import run_factory
from lightning_fed.deploy.failure_cause import failure_cause, is_out_of_memory, out_of_memory_line
from lightning_fed.deploy.partitions import discover_partitions
from lightning_fed.deploy.queries import ask_clients
from lightning_fed.deploy.records import ReplyLimits, from_arrays, record_to_evaluation, to_arrays
from lightning_fed.deploy.tasks import Task, checked_update, new_task, unbound, uploaded_extras
from lightning_fed.deploy.train_rounds import TrainRound, choose_train_round
from lightning_fed.federation.context import RoundContext
from lightning_fed.federation.hooks import Payload, payload_nbytes
from lightning_fed.modules.base import FederatedModule
from lightning_fed.run import FederatedRun
from lightning_fed.state import StateDict, clone_state
from lightning_fed.strategies.base import AggregationError

__all__ = ["FederatedServer", "round_counts"]


class FederatedServer(FlowerStrategy):
    """Runs a :class:`~lightning_fed.run.FederatedRun`'s rounds over a Flower ``Grid``.

    Args:
        run: The run (the config's ``federation:`` section): its
            :func:`~lightning_fed.run_factory.server_round` (rounds, clients per
            round, strategy, hooks, seed, min_clients, privacy) runs the rounds here (``server.server``)
            and its :func:`~lightning_fed.run_factory.evaluation_plan` decides
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
        self.run, self.server, self.evaluation = run, run_factory.server_round(run), run_factory.evaluation_plan(run)
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
        self.tasks: dict[int, Task] = {}  # this exchange's message to each client (train or evaluate)
        self.eval_asked: set[int] = set()  # clients asked to evaluate this round
        self.late: list[int] = []  # clients of the last synchronous train round with no reply
        self.round_idx, self.grid = 0, None  # the open round and the grid, for the hooks' queries (:meth:`ask`)
        #: The run's train round (:func:`~lightning_fed.deploy.train_rounds.choose_train_round`), set by :meth:`start`.
        self.train_round: TrainRound | None = None

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
        """A synchronous train round's messages: the round's clients are sampled and prepared
        (the hooks' queries and round start) and each gets one train message, to the node holding
        its partition (a client no node holds fails)."""
        round_idx, server = server_round - 1, self.server
        self.round_idx, self.grid = round_idx, grid
        clients = server.sample(round_idx)
        server.prepare(self.context, self.module, round_idx, clients, self.ask)
        server.open(round_idx, clients)
        self.tasks = {}
        for cid in clients:
            if cid not in self.nodes:
                server.fail(cid)  # no node holds this partition
                continue
            instructions = server.client_instructions(cid, round_idx)
            start, downlink = server.send(cid)
            extras = uploaded_extras(server.strategy, start, downlink)
            self.tasks[cid] = new_task(
                MessageType.TRAIN, cid, self.nodes[cid], round_idx, start, downlink, instructions, extras
            )
        return [task.message for task in self.tasks.values()]

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
            why = unbound(self.tasks.get(cid), msg)
            if why is not None:  # e.g. an earlier round's reply replayed: refused; no reply counts as failed
                rank_zero_warn(f"round {server_round}: reply for client {cid} refused: {why}")
                continue
            answered.add(cid)
            if msg.has_error():
                server.fail(cid, failure_cause(msg.error.reason))
                rank_zero_warn(
                    f"round {server_round}: client {cid} failed and is left out: {failure_cause(msg.error.reason)}"
                )
                continue
            try:
                update = checked_update(self.tasks[cid], msg, self.limits, compressed=server.compressor is not None)
            except (AggregationError, ValueError) as err:
                server.reject(cid, str(err))
                continue
            server.receive(update)
        self.late = [c for c in server.clients if server.sent(c) is not None and c not in answered]
        for cid in [] if silent_are_late else self.late:
            server.fail(cid)  # no reply: timed out
        try:
            server.close(self.context, self.module)
        except RuntimeError:
            killed = sorted(c for c, why in server.causes.items() if is_out_of_memory(why))
            if not killed or server.report.private:  # a private run names no client
                raise
            whom = f"client{'s' if len(killed) > 1 else ''} {', '.join(map(str, killed))}"
            outcome = f"round {server_round} had fewer than federation.min_clients={server.min_clients} valid updates"
            raise RuntimeError(out_of_memory_line(whom, outcome)) from None
        return to_arrays(server.global_state), round_counts(server.report.history[-1])

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The clients of the run's evaluation plan (``federation.eval_clients``, the in-process
        loop's rule) that a node holds evaluate the new global state (the model the train round
        says they evaluate: :meth:`~lightning_fed.deploy.train_rounds.TrainRound.evaluation_model`)."""
        round_idx = server_round - 1
        planned = self.evaluation.clients_for(self.server, round_idx)
        self.eval_asked = {cid for cid in planned if cid in self.nodes}
        self.tasks = {}
        sent = 0
        for cid in sorted(self.eval_asked):
            instructions = self.evaluation_instructions(cid, round_idx)
            sent += sum(payload_nbytes(p) for p in instructions.values())
            model = self._evaluation_model(cid)
            self.tasks[cid] = new_task(MessageType.EVALUATE, cid, self.nodes[cid], round_idx, model, {}, instructions)
        self.eval_down_bytes += sent
        for logger in self.context.loggers if sent else []:
            logger.log_metrics({"comm/eval_down_bytes": float(sent)}, step=server_round)
        return [task.message for task in self.tasks.values()]

    def _evaluation_model(self, client_id: int) -> StateDict:
        if self.train_round is not None:
            return self.train_round.evaluation_model(client_id)
        return self.server.client_start(client_id)[0]

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
                if cid in self.eval_asked and (why := unbound(self.tasks.get(cid), msg)) is not None:
                    raise ValueError(why)
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
        """Run every round; returns Flower's ``Result`` and writes the run's record.

        The one outer loop of every train-round path: the run's :class:`~lightning_fed.deploy.train_rounds.TrainRound`
        (chosen, and an impossible run refused, before anything is sent or written) runs each
        round up to ``ServerRound.close``; the loop records the round, evaluates it per
        ``federation.eval_every`` and stops early when the next round would exceed the privacy
        budget. A server whose state was loaded goes on from its next round (``len(report.history)``).
        """
        server = self.server
        timeout = self.timeout if timeout is None else timeout
        self.grid, self.train_round = grid, choose_train_round(self, grid, timeout)
        if initial_arrays is not None:
            server.global_state = from_arrays(initial_arrays)
        if not server.global_state:
            server.global_state = clone_state(self.module.shared_parameters())
        server.strategy.setup(server.global_state, self.num_clients)
        self.summary()
        for hook in server.hooks:
            hook.setup_server(server, self.context, self.module)
        self.nodes = discover_partitions(grid, min_nodes or 1, timeout, self.num_clients)
        self.train_round.begin()
        result = Result()
        for round_idx in range(len(server.report.history), num_rounds or server.rounds):
            self.round_idx = round_idx
            self.train_round.run(round_idx)
            server_round = round_idx + 1
            result.arrays = to_arrays(server.global_state)
            result.train_metrics_clientapp[server_round] = round_counts(server.report.history[-1])
            if server.stopping:  # the next round would exceed the privacy budget
                rank_zero_warn(f"stopping: {server.stop_reason}")
            if self.evaluation.evaluates(server_round):  # federation.eval_every
                messages = self.configure_evaluate(server_round, result.arrays, ConfigRecord(), grid)
                evaluated = self.aggregate_evaluate(server_round, grid.send_and_receive(messages, timeout=timeout))
                if evaluated is not None:
                    result.evaluate_metrics_clientapp[server_round] = evaluated
            if server.stopping:
                break
        self.train_round.end()
        self.finish()
        return result

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


def round_counts(record: dict[str, Any]) -> MetricRecord:
    """A recorded round's clients aggregated, failed and rejected (what Flower's ``Result`` keeps per round)."""
    return MetricRecord({k: len(record[k]) for k in ("aggregated", "failed", "rejected") if k in record})
