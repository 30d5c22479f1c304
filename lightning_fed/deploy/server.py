"""Our server strategy inside a Flower strategy, for real multi-machine runs.

:class:`FederatedServer` is a ``flwr.serverapp.strategy.Strategy``. Its rounds follow the
in-process :class:`~lightning_fed.callbacks.FederatedLoop` exactly: the same clients are
sampled (a pure function of seed and round), each gets ``strategy.client_model`` and
``strategy.downlink``, replies are checked with
:func:`~lightning_fed.strategies.check_update`, a client whose node fails or times out is
left out, the round fails below ``min_clients``, and the strategy aggregates. Server round
hooks run here (with a :class:`ServerContext` in place of the Trainer). The run's record is
the same ``summary.json`` and TensorBoard scalars, plus the final adapter folder.

A client is a partition of the data (``partition-id`` in the SuperNode's node config); the
server asks every node which partition it holds before the first round.

Replies are untrusted. A reply is bound to the node it came from (``src_node_id``, which the
SuperLink sets, authenticated when SuperNode authentication is on): a node answers only for
the client it holds, so a reply claiming another client's ``client-id`` is rejected and
counted, and the real client's reply still counts. Malformed replies (arrays that are not
floating point or do not match what was sent, extras the strategy did not ask for, metrics
that are not finite numbers, too many metric keys, ``num-examples`` above ``max_examples``)
are rejected with a warning: a train reply as a rejected update, an evaluate reply as a
rejected evaluation (``rejected_evaluations`` in ``summary.json``). None stops the run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result
from flwr.serverapp.strategy import Strategy as FlowerStrategy
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_fed.callbacks.federated_loop import FederatedLoop
from lightning_fed.deploy.records import (
    ReplyLimits,
    from_arrays,
    record_to_evaluation,
    record_to_update,
    to_arrays,
    train_instruction,
)
from lightning_fed.federation.sampling import sample_clients
from lightning_fed.modules.base import FederatedModule
from lightning_fed.state import StateDict, clone_state, state_nbytes
from lightning_fed.strategies.base import AggregationError, ClientUpdate

PARTITION_QUERY = "query.partition"


@dataclass
class ServerContext:
    """What server hooks get instead of a ``Trainer`` under Flower: where to write and log."""

    default_root_dir: str
    loggers: list[Any] = field(default_factory=list)
    is_global_zero: bool = True

    @property
    def log_dir(self) -> str:
        return self.default_root_dir


class FederatedServer(FlowerStrategy):
    """Runs a :class:`FederatedLoop`'s rounds over a Flower ``Grid``.

    Args:
        loop: The run's loop (rounds, clients per round, strategy, hooks, seed, min_clients).
        module: The server's copy of the model: its shared parameters are the initial global
            state, round hooks work on it, and the final adapter is saved from it.
        num_clients: Number of data partitions (clients) in the federation.
        output_dir: Where ``summary.json``, TensorBoard events and the adapter go.
        timeout: Seconds to wait for a round's replies; a node that has not answered by then
            counts as a failed client.
        limits: Bounds on what a reply may claim (``num-examples``, number of metric keys).
    """

    def __init__(
        self,
        loop: FederatedLoop,
        module: FederatedModule,
        num_clients: int,
        output_dir: str | Path,
        timeout: float = 3600.0,
        limits: ReplyLimits | None = None,
    ) -> None:
        if loop.clients_per_round > num_clients:
            raise ValueError(
                f"federation.clients_per_round={loop.clients_per_round} exceeds data.num_clients={num_clients}"
            )
        self.loop, self.module, self.num_clients, self.timeout = loop, module, num_clients, timeout
        self.limits = limits or ReplyLimits()
        self.rejected_evaluations = 0
        self.context = ServerContext(str(output_dir), [TensorBoardLogger(str(output_dir), name="", version="")])
        self.nodes: dict[int, int] = {}  # client (partition) -> node id
        self._sent: dict[int, StateDict] = {}

    # --------------------------------------------------------------- Flower's strategy API
    def summary(self) -> None:
        lp = self.loop
        rank_zero_info(
            f"FederatedServer: {type(lp.strategy).__name__}, {lp.rounds} rounds, {lp.clients_per_round} of"
            f" {self.num_clients} clients per round, min_clients={lp.min_clients}, seed={lp.seed}"
        )

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One train message per sampled client, to the node holding its partition."""
        round_idx, lp = server_round - 1, self.loop
        clients = sample_clients(self.num_clients, lp.clients_per_round, lp.seed, round_idx)
        for hook in lp.hooks:
            hook.on_round_start(lp, self.context, self.module, round_idx, clients)
        self._round_clients, self._missing, self._sent, self._extras_layout = list(clients), [], {}, {}
        self._down = 0
        messages = []
        for cid in clients:
            if cid not in self.nodes:
                self._missing.append(cid)
                continue
            start, downlink = lp.client_start(cid)
            self._sent[cid] = start
            self._extras_layout[cid] = self._expected_extras(start, downlink)
            self._down += state_nbytes(start) + state_nbytes(downlink)
            content = train_instruction(round_idx, cid, start, downlink)
            messages.append(Message(content=content, message_type=MessageType.TRAIN, dst_node_id=self.nodes[cid]))
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Check every reply, aggregate the valid ones, run the after-aggregate hooks."""
        round_idx, lp = server_round - 1, self.loop
        failed, rejected, valid, answered = list(self._missing), {}, [], set()
        up = 0
        for msg in replies:
            cid = self._client_of(msg.metadata.src_node_id)
            if cid in answered or cid not in self._sent:
                rank_zero_warn(
                    f"round {server_round}: reply from node {msg.metadata.src_node_id} ignored: it was not asked to train (or answered twice)"
                )
                continue
            answered.add(cid)
            if msg.has_error():
                failed.append(cid)
                rank_zero_warn(f"round {server_round}: client {cid} failed and is left out: {msg.error.reason}")
                continue
            try:
                update = self._checked_update(cid, msg)
                up += state_nbytes(update.state) + state_nbytes(update.extras)
                valid.append(lp.admit(self._sent[cid], update))
            except (AggregationError, ValueError) as err:
                rejected[cid] = str(err)
                rank_zero_warn(f"round {server_round}: update of client {cid} rejected: {err}")
        failed += [c for c in self._sent if c not in answered]  # no reply: timed out
        lp.failed_clients += len(failed)
        lp.rejected_updates += len(rejected)
        lp.advance(self.context, self.module, round_idx, valid, len(self._round_clients), failed, rejected)
        extra_up, extra_down = lp.take_extra_bytes()
        lp.report.end_round(
            self.context,
            round_idx,
            clients=self._round_clients,
            updates=sorted(valid, key=lambda u: u.client_id),
            failed=sorted(failed),
            rejected=rejected,
            up_bytes=up + extra_up,
            down_bytes=self._down + extra_down,
            seconds=time.perf_counter() - self._t0,
        )
        return to_arrays(lp.global_state), MetricRecord(
            {"aggregated": len(valid), "failed": len(failed), "rejected": len(rejected)}
        )

    def _checked_update(self, cid: int, msg: Message) -> ClientUpdate:
        """The update in ``msg`` from the node holding client ``cid``; ``ValueError`` unless well-formed.

        Beyond :func:`~lightning_fed.deploy.records.record_to_update` (floating-point arrays,
        bounded metrics) and :func:`~lightning_fed.strategies.check_update` (keys, shapes, finite
        values; :meth:`admit` runs it): the reply claims client ``cid``, the one its node holds,
        and its extras are exactly the names and shapes the strategy's client side uploads.
        """
        update = record_to_update(msg.content, self.limits)
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
            extras = self.loop.strategy.local_correction(start, downlink, {}).finish(start, 1, 1.0)
        except ValueError:
            return {}
        return {k: tuple(v.shape) for k, v in extras.items()}

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Every evaluated client (``data.eval_clients``) evaluates the new global state."""
        return [
            Message(
                content=train_instruction(server_round - 1, cid, self.loop.client_start(cid)[0], {}),
                message_type=MessageType.EVALUATE,
                dst_node_id=node,
            )
            for cid, node in sorted(self.nodes.items())
            if cid < self.eval_clients
        ]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Average the evaluations of the clients asked; a malformed or impostor reply is rejected."""
        report = self.loop.report
        report.start_eval()
        seen: set[int] = set()
        for msg in replies:
            if msg.has_error():
                continue
            cid = self._client_of(msg.metadata.src_node_id)
            try:
                claimed, count, means = record_to_evaluation(msg.content, self.limits)
                if claimed != cid or cid in seen or not 0 <= cid < self.eval_clients:
                    raise ValueError(
                        f"node {msg.metadata.src_node_id} holds client {cid} but its reply claims client-id={claimed} (or was not asked)"
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
        eval_clients: int | None = None,
        min_nodes: int | None = None,
    ) -> Result:
        """Run every round; returns Flower's ``Result`` and writes the run's record."""
        lp = self.loop
        if initial_arrays is not None:
            lp.global_state = from_arrays(initial_arrays)
        if not lp.global_state:
            lp.global_state = clone_state(self.module.shared_parameters())
        lp.strategy.setup(lp.global_state, self.num_clients)
        self.eval_clients = eval_clients or self.num_clients
        timeout = self.timeout if timeout is None else timeout
        self.summary()
        for hook in lp.hooks:
            hook.setup(lp, self.context, self.module)
        self.nodes = discover_partitions(grid, min_nodes or 1, timeout, self.num_clients)
        result = Result()
        for server_round in range(1, (num_rounds or lp.rounds) + 1):
            self._t0 = time.perf_counter()
            replies = grid.send_and_receive(
                self.configure_train(server_round, to_arrays(lp.global_state), ConfigRecord(), grid), timeout=timeout
            )
            arrays, metrics = self.aggregate_train(server_round, replies)
            result.arrays, result.train_metrics_clientapp[server_round] = arrays, metrics
            replies = grid.send_and_receive(
                self.configure_evaluate(server_round, arrays, ConfigRecord(), grid), timeout=timeout
            )
            evaluated = self.aggregate_evaluate(server_round, replies)
            if evaluated is not None:
                result.evaluate_metrics_clientapp[server_round] = evaluated
        self.finish()
        return result

    def finish(self) -> None:
        """Write the final adapter, the global state and ``summary.json``."""
        out = Path(self.context.default_root_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.module.load_state(self.loop.global_state)
        if self.loop.save_adapter:
            self.module.save_adapter(out / "adapter")
        torch.save(self.loop.global_state, out / "global_state.pt")
        extra = {
            **self.loop.fault_counts(),
            "rejected_evaluations": self.rejected_evaluations,
            "hooks": self.loop.hook_summaries(),
            "engine": "flower",
        }
        self.loop.report.write_summary(self.context, extra=extra)
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
