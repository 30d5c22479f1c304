"""FedBuff over Flower with the real arrival order (Nguyen et al., 2022, arXiv:2106.06639, Algorithm 1).

With :class:`~lightning_fed.heterogeneity.AsyncArrivals` ``(arrivals: real)`` and
:class:`~lightning_fed.strategies.FedBuff`, :meth:`FederatedServer.start
<lightning_fed.deploy.FederatedServer.start>` hands the rounds to :class:`BufferedRounds`:

* it keeps ``concurrency`` clients in flight: each is pushed (``grid.push_messages``) the current
  model, which FedBuff remembers with its version (:meth:`~lightning_fed.strategies.FedBuff.assign`);
  a free slot goes to an idle client drawn with the hook's seed (a client whose reply was already
  taken in the open server step waits for the next step);
* it polls ``grid.pull_messages`` and takes the replies in the order they come back (within one
  poll, in the grid's order); each is checked and bound to the message it answers, as in the
  synchronous path;
* each time ``buffer_size`` updates are admitted it closes a server step through the same
  :class:`~lightning_fed.federation.ServerRound` as a synchronous round: FedBuff discounts each
  update by its staleness ``tau = version now - version the client started from`` (Algorithm 1's
  ``s(tau)``; the step's ``clients`` are its arrivals in arrival order), steps, the after-aggregate
  hooks run, the round is recorded (one server step = one recorded round: ``summary.json``,
  ``comm/*``, ``system/wall_time``, ``system/staleness``) and evaluated per ``federation.eval_every``;
* a client that has not answered ``timeout`` seconds after its dispatch counts as failed in the
  step that is open then, and its slot is given to another client. The server never waits for a
  slow client: its reply lands in whichever step is open when it arrives, with its staleness.

A client's download is counted in the step its reply lands in (with its upload), as in the
virtual-clock mode; clients still in flight when the run ends are abandoned (their downloads are
in no round). Federated evaluation stays a synchronous exchange at a step's end (a node busy
training answers after its task). Hooks other than :class:`AsyncArrivals` see each step open with
an empty client list (a step's clients are its arrivals, not known in advance) and may not query
clients. The run continues from ``len(report.history)``: a server whose state was loaded
(:meth:`ServerRound.load_state_dict <lightning_fed.federation.ServerRound.load_state_dict>`) goes on
with the next step; the clients in flight before it stopped are forgotten (their replies answer
messages this server never sent), so no update is counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import monotonic, sleep
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import ConfigRecord, Message, MessageType, MetricRecord
from flwr.serverapp.strategy import Result
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_fed.deploy.records import check_binding, new_nonce, record_to_update, to_arrays, train_instruction
from lightning_fed.federation.sampling import derive_seed
from lightning_fed.strategies.base import AggregationError, ClientUpdate

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from lightning_fed.federation.hooks import RoundHook
    from lightning_fed.heterogeneity.async_rounds import AsyncArrivals

POLL_SECONDS = 0.05
"""How long the server sleeps when a poll brings no reply."""

_DISPATCH_TAG = 0x0B0F  # derive_seed tag of the draws of which idle client starts


def real_arrivals(hooks: list[RoundHook]) -> AsyncArrivals | None:
    """The run's hook that asks for the real arrival order (:class:`AsyncArrivals`'s
    ``server_path()`` is ``"buffered"`` with ``arrivals: real``; it is then marked as
    running on a transport with clients in flight, so its ``setup_server`` accepts it), else ``None``."""
    hook = next((h for h in hooks if h.server_path() == "buffered"), None)
    if hook is not None:
        hook.concurrent = True
    return hook


@dataclass
class Flight:
    """A train message out: to ``client`` on ``node``, from FedBuff version ``version``."""

    client: int
    node: int
    nonce: str
    round_idx: int  # the server step it was dispatched in (the round its message names)
    version: int
    deadline: float


class BufferedRounds:
    """The server steps of a FedBuff run with real arrival order (see the module docstring).

    Args:
        server: The :class:`~lightning_fed.deploy.FederatedServer` (its nodes, loop, context, module,
            reply limits and evaluation exchange).
        hook: The run's :class:`AsyncArrivals` (``concurrency``, the seed, the logged times).
        grid: Flower's grid (``push_messages``, ``pull_messages``; ``send_and_receive`` for evaluation).
        timeout: Seconds a client may take from dispatch to reply.
    """

    def __init__(self, server: Any, hook: AsyncArrivals, grid: Grid, timeout: float) -> None:
        self.fed, self.rounds, self.hook, self.grid, self.timeout = server, server.server, hook, grid, timeout
        self.fedbuff = self.rounds.strategy
        self.flights: dict[str, Flight] = {}  # message id -> flight
        self.arrived: list[Message] = []  # pulled, not yet taken into a step
        self.taken: set[int] = set()  # clients whose outcome is in the open step
        self.admitted: list[int] = []  # staleness of the open step's admitted updates
        self.t0 = monotonic() - hook.clock  # a resumed run's wall time goes on

    def check(self) -> None:
        """One-line ``ValueError`` for settings under which the buffer could never fill."""
        n, k = len(self.fed.nodes), self.fedbuff.buffer_size
        problems = []
        if self.hook.concurrency > n:
            problems.append(f"concurrency={self.hook.concurrency} exceeds the {n} clients with a node")
        if k > n:
            problems.append(f"FedBuff buffer_size={k} exceeds the {n} clients with a node (one update each per step)")
        if self.rounds.min_clients > k:
            problems.append(f"federation.min_clients={self.rounds.min_clients} exceeds FedBuff buffer_size={k}")
        if problems:
            raise ValueError("federation.hooks: AsyncArrivals(arrivals=real): " + "; ".join(problems))

    def run(self, num_rounds: int) -> Result:
        """Server steps ``len(report.history) + 1 .. num_rounds``; Flower's ``Result``."""
        self.check()
        rank_zero_info(
            f"FedBuff in real arrival order: {self.hook.concurrency} clients in flight, a server step every"
            f" {self.fedbuff.buffer_size} updates"
        )
        result = Result()
        server = self.rounds
        for round_idx in range(len(server.report.history), num_rounds):
            server.prepare(self.fed.context, self.fed.module, round_idx, [], self._no_queries)
            server.open(round_idx, [])
            self.taken, self.admitted = set(), []
            while len(self.admitted) < self.fedbuff.buffer_size:
                self._dispatch(round_idx)
                if not self._take_next(round_idx):
                    sleep(POLL_SECONDS)
            server.close(self.fed.context, self.fed.module)
            self.hook.clock = monotonic() - self.t0
            self.hook.log_step(self.fed.context, round_idx, self.admitted)
            self.fedbuff.keep_versions({f.version for f in self.flights.values()} | {self.fedbuff.version})
            record = server.report.history[-1]
            counts = {k: len(record[k]) for k in ("aggregated", "failed", "rejected") if k in record}
            result.arrays = to_arrays(server.global_state)
            result.train_metrics_clientapp[round_idx + 1] = MetricRecord(counts)
            if server.stopping:
                rank_zero_warn(f"stopping: {server.stop_reason}")
            if self.fed.evaluation.evaluates(round_idx + 1):
                self._evaluate(round_idx + 1, result)
            if server.stopping:
                break
        if self.flights:
            rank_zero_info(f"FedBuff: {len(self.flights)} clients still training are not waited for")
        return result

    # --------------------------------------------------------------------------- the steps
    def _no_queries(self, hook_index: int, queries: dict) -> dict:
        name = type(self.rounds.hooks[hook_index]).__name__
        raise ValueError(
            f"federation.hooks: {name} queries clients before a round;"
            " AsyncArrivals(arrivals=real) has no rounds to ask in"
        )

    def _dispatch(self, round_idx: int) -> None:
        """Fill the free slots with idle clients, each sent the current model."""
        busy = self.taken | {f.client for f in self.flights.values()}  # a pulled reply's flight is still in
        while len(self.flights) < self.hook.concurrency:
            idle = [c for c in sorted(self.fed.nodes) if c not in busy]
            if not idle:
                return
            rng = np.random.default_rng(derive_seed(self.hook.seed, _DISPATCH_TAG, self.hook.dispatches))
            self.hook.dispatches += 1
            cid = idle[int(rng.integers(len(idle)))]
            busy.add(cid)
            self.fedbuff.remember(self.rounds.global_state)
            self.fedbuff.assign(cid, self.fedbuff.version)
            start, downlink = self.rounds.client_start(cid)
            nonce = new_nonce()
            instructions = self.rounds.client_instructions(cid, round_idx)
            content = train_instruction(round_idx, cid, start, downlink, instructions, nonce)
            node = self.fed.nodes[cid]
            message = Message(content=content, message_type=MessageType.TRAIN, dst_node_id=node)
            (message_id,) = list(self.grid.push_messages([message]))
            flight = Flight(cid, node, nonce, round_idx, self.fedbuff.version, monotonic() + self.timeout)
            self.flights[message_id] = flight

    def _take_next(self, round_idx: int) -> bool:
        """Take the next reply (pulling when none is waiting) or time-out into the open step;
        ``False`` when nothing happened (the caller sleeps)."""
        if not self.arrived and self.flights:
            self.arrived = list(self.grid.pull_messages(list(self.flights)))
        if self.arrived:
            self._land(self.arrived.pop(0), round_idx)
            return True
        late = [(i, f) for i, f in self.flights.items() if monotonic() > f.deadline]
        for message_id, flight in late:
            del self.flights[message_id]
            self.hook.timed_out += 1
            rank_zero_warn(f"round {round_idx + 1}: client {flight.client} timed out and is left out")
            self._outcome(flight)
            self.rounds.fail(flight.client)
        if not late and not self.flights:
            raise RuntimeError(
                f"round {round_idx + 1}: only {len(self.admitted)} of FedBuff buffer_size={self.fedbuff.buffer_size}"
                " updates came in and no client is left to dispatch in this step"
                f" (failed: {sorted(self.rounds.failed)}, rejected: {sorted(self.rounds.rejected)})"
            )
        return bool(late)

    def _land(self, msg: Message, round_idx: int) -> None:
        """One reply into the open step: failed, refused, rejected or admitted (then buffered)."""
        flight = self.flights.pop(msg.metadata.reply_to_message_id, None)
        if flight is None:  # pulled by id: only a grid that misbehaves gets here
            rank_zero_warn(f"round {round_idx + 1}: a reply to no message in flight is ignored")
            return
        self._outcome(flight)
        cid = flight.client
        if msg.metadata.src_node_id != flight.node:
            rank_zero_warn(f"round {round_idx + 1}: reply for client {cid} refused: it comes from another node")
            self.rounds.fail(cid)
            return
        if msg.has_error():
            rank_zero_warn(f"round {round_idx + 1}: client {cid} failed and is left out: {msg.error.reason}")
            self.rounds.fail(cid)
            return
        try:
            check_binding(msg.content, flight.round_idx, cid, flight.nonce)
        except ValueError as err:
            rank_zero_warn(f"round {round_idx + 1}: reply for client {cid} refused: {err}")
            self.rounds.fail(cid)
            return
        try:
            update = self._checked_update(cid, msg)
        except (AggregationError, ValueError) as err:
            self.rounds.reject(cid, str(err))
            return
        self.rounds.receive(update)
        tau = self.fedbuff.version - flight.version
        stale = self.fedbuff.max_staleness is not None and tau > self.fedbuff.max_staleness
        if cid not in self.rounds.rejected and not stale:  # FedBuff drops (and counts) a too-stale one
            self.admitted.append(tau)

    def _outcome(self, flight: Flight) -> None:
        """``flight``'s client belongs to the open step: listed in arrival order, its download counted."""
        self.taken.add(flight.client)
        self.rounds.clients.append(flight.client)
        self.rounds.send(flight.client)  # FedBuff sends the model of the client's start version again

    def _checked_update(self, cid: int, msg: Message) -> ClientUpdate:
        """The update of ``msg``; ``ValueError`` unless it claims ``cid`` and carries the extras
        (names and shapes) the strategy's client side uploads."""
        update = record_to_update(msg.content, self.fed.limits, compressed=self.rounds.compressor is not None)
        if update.client_id != cid:
            raise ValueError(
                f"node {msg.metadata.src_node_id} holds client {cid} but its reply claims client-id={update.client_id}"
            )
        start, downlink = self.rounds.client_start(cid)
        try:
            expected = self.fedbuff.local_correction(start, downlink, {}).finish(start, 1, 1.0)
        except ValueError:
            expected = {}
        got = {k: tuple(v.shape) for k, v in update.extras.items()}
        if got != {k: tuple(v.shape) for k, v in expected.items()}:
            raise ValueError(f"client {cid}: extras do not match the strategy's (got {sorted(got)[:5]})")
        return update

    def _evaluate(self, server_round: int, result: Result) -> None:
        # Evaluation is of the new global model: the start versions FedBuff holds for the clients in
        # flight (its client_model) are their training's, not this exchange's.
        in_flight, self.fedbuff.start_versions = self.fedbuff.start_versions, {}
        try:
            messages = self.fed.configure_evaluate(server_round, None, ConfigRecord(), self.grid)
        finally:
            self.fedbuff.start_versions = in_flight
        replies = self.grid.send_and_receive(messages, timeout=self.timeout)
        evaluated = self.fed.aggregate_evaluate(server_round, replies)
        if evaluated is not None:
            result.evaluate_metrics_clientapp[server_round] = evaluated
