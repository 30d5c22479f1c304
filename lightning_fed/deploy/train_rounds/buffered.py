"""FedBuff over Flower with the real arrival order (Nguyen et al., 2022, arXiv:2106.06639, Algorithm 1).

With :class:`~lightning_fed.heterogeneity.AsyncArrivals` ``(arrivals: real)`` and
:class:`~lightning_fed.strategies.FedBuff`, each round of :meth:`FederatedServer.start
<lightning_fed.deploy.FederatedServer.start>`'s outer loop is one server step of :class:`BufferedRound`:

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
  ``comm/*``, ``system/wall_time``, ``system/staleness``); the outer loop evaluates it per
  ``federation.eval_every`` (the new global model: :meth:`BufferedRound.evaluation_model`) and
  stops as after any round;
* a client that has not answered ``timeout`` seconds after its dispatch counts as failed in the
  step that is open then, and its slot is given to another client. The server never waits for a
  slow client: its reply lands in whichever step is open when it arrives, with its staleness.

A client's download is counted in the step its reply lands in (with its upload), as in the
virtual-clock mode; clients still in flight when the run ends are abandoned (their downloads are
in no round). Federated evaluation stays a synchronous exchange at a step's end (a node busy
training answers after its task). Hooks other than :class:`AsyncArrivals` see each step open with
an empty client list (a step's clients are its arrivals, not known in advance: each joins the
open step, ``ServerRound.join``) and may not query clients. The outer loop goes on from
``len(report.history)``: a server whose state was loaded
(:meth:`ServerRound.load_state_dict <lightning_fed.federation.ServerRound.load_state_dict>`) goes on
with the next step; the clients in flight before it stopped are forgotten (their replies answer
messages this server never sent), so no update is counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import monotonic, sleep
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import Message, MessageType
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_fed.deploy.tasks import Task, checked_update, new_task, unbound, uploaded_extras
from lightning_fed.deploy.train_rounds.protocol import TrainRound
from lightning_fed.federation.sampling import derive_seed
from lightning_fed.strategies.base import AggregationError

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from lightning_fed.deploy.train_rounds.protocol import RoundServer
    from lightning_fed.heterogeneity.async_rounds import AsyncArrivals
    from lightning_fed.state import StateDict

POLL_SECONDS = 0.05
"""How long the server sleeps when a poll brings no reply."""

_DISPATCH_TAG = 0x0B0F  # derive_seed tag of the draws of which idle client starts


@dataclass
class Flight:
    """A train message out (its :class:`~lightning_fed.deploy.tasks.Task`, whose round is the server
    step it was dispatched in), from FedBuff version ``version``, due by ``deadline``."""

    task: Task
    version: int
    deadline: float


class BufferedRound(TrainRound):
    """The server steps of a FedBuff run with real arrival order (see the module docstring).

    Args:
        fed: The :class:`~lightning_fed.deploy.FederatedServer` (its nodes, context, module and reply limits).
        grid: Flower's grid (``push_messages``, ``pull_messages``).
        timeout: Seconds a client may take from dispatch to reply.
        hook: The run's :class:`AsyncArrivals` (``concurrency``, the seed, the logged times); it is
            marked as running on a transport with clients in flight (its ``setup_server`` accepts that).
    """

    asked_by, instead = "AsyncArrivals(arrivals=real)", "use arrivals=virtual"

    def __init__(self, fed: RoundServer, grid: Grid, timeout: float, hook: AsyncArrivals) -> None:
        super().__init__(fed, grid, timeout, hook)
        hook.concurrent = True
        self.fedbuff = self.server.strategy
        self.flights: dict[str, Flight] = {}  # message id -> flight
        self.arrived: list[Message] = []  # pulled, not yet taken into a step
        self.taken: set[int] = set()  # clients whose outcome is in the open step
        self.admitted: list[int] = []  # staleness of the open step's admitted updates
        self.t0 = 0.0

    def begin(self) -> None:
        """One-line ``ValueError`` for settings under which the buffer could never fill."""
        n, k = len(self.fed.nodes), self.fedbuff.buffer_size
        problems = []
        if self.hook.concurrency > n:
            problems.append(f"concurrency={self.hook.concurrency} exceeds the {n} clients with a node")
        if k > n:
            problems.append(f"FedBuff buffer_size={k} exceeds the {n} clients with a node (one update each per step)")
        if self.server.min_clients > k:
            problems.append(f"federation.min_clients={self.server.min_clients} exceeds FedBuff buffer_size={k}")
        if problems:
            raise ValueError(f"federation.hooks: {self.asked_by}: " + "; ".join(problems))
        rank_zero_info(
            f"FedBuff in real arrival order: {self.hook.concurrency} clients in flight, a server step every"
            f" {self.fedbuff.buffer_size} updates"
        )
        self.t0 = monotonic() - self.hook.clock  # a resumed run's wall time goes on

    def run(self, round_idx: int) -> None:
        """Server step ``round_idx``: dispatch and take replies until ``buffer_size`` updates are admitted."""
        server, fed = self.server, self.fed
        server.prepare(fed.context, fed.module, round_idx, [], self._no_queries)
        server.open(round_idx, [])
        self.taken, self.admitted = set(), []
        while len(self.admitted) < self.fedbuff.buffer_size:
            self._dispatch(round_idx)
            if not self._take_next(round_idx):
                sleep(POLL_SECONDS)
        server.close(fed.context, fed.module)
        self.hook.clock = monotonic() - self.t0
        self.hook.log_step(fed.context, round_idx, self.admitted)
        self.fedbuff.keep_versions({f.version for f in self.flights.values()} | {self.fedbuff.version})

    def evaluation_model(self, client_id: int) -> StateDict:
        """The new global model: a client in flight keeps its start version for its training only."""
        return self.server.global_state

    def end(self) -> None:
        if self.flights:
            rank_zero_info(f"FedBuff: {len(self.flights)} clients still training are not waited for")

    # --------------------------------------------------------------------------- the steps
    def _no_queries(self, hook_index: int, queries: dict) -> dict:
        name = type(self.server.hooks[hook_index]).__name__
        raise ValueError(
            f"federation.hooks: {name} queries clients before a round; {self.asked_by} has no rounds to ask in"
        )

    def _dispatch(self, round_idx: int) -> None:
        """Fill the free slots with idle clients, each sent the current model."""
        rounds, fedbuff = self.server, self.fedbuff
        busy = self.taken | {f.task.client for f in self.flights.values()}  # a pulled reply's flight is still in
        while len(self.flights) < self.hook.concurrency:
            idle = [c for c in sorted(self.fed.nodes) if c not in busy]
            if not idle:
                return
            rng = np.random.default_rng(derive_seed(self.hook.seed, _DISPATCH_TAG, self.hook.dispatches))
            self.hook.dispatches += 1
            cid = idle[int(rng.integers(len(idle)))]
            busy.add(cid)
            fedbuff.remember(rounds.global_state)
            fedbuff.assign(cid, fedbuff.version)
            start, downlink = rounds.client_start(cid)
            instructions = rounds.client_instructions(cid, round_idx)
            extras = uploaded_extras(fedbuff, start, downlink)
            task = new_task(
                MessageType.TRAIN, cid, self.fed.nodes[cid], round_idx, start, downlink, instructions, extras
            )
            (message_id,) = list(self.grid.push_messages([task.message]))
            self.flights[message_id] = Flight(task, fedbuff.version, monotonic() + self.timeout)

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
            rank_zero_warn(f"round {round_idx + 1}: client {flight.task.client} timed out and is left out")
            self._join(flight)
            self.server.fail(flight.task.client)
        if not late and not self.flights:
            raise RuntimeError(
                f"round {round_idx + 1}: only {len(self.admitted)} of FedBuff buffer_size={self.fedbuff.buffer_size}"
                " updates came in and no client is left to dispatch in this step"
                f" (failed: {sorted(self.server.failed)}, rejected: {sorted(self.server.rejected)})"
            )
        return bool(late)

    def _land(self, msg: Message, round_idx: int) -> None:
        """One reply into the open step: failed, refused, rejected or admitted (then buffered)."""
        rounds = self.server
        flight = self.flights.pop(msg.metadata.reply_to_message_id, None)
        if flight is None:  # pulled by id: only a grid that misbehaves gets here
            rank_zero_warn(f"round {round_idx + 1}: a reply to no message in flight is ignored")
            return
        self._join(flight)
        cid = flight.task.client
        if msg.metadata.src_node_id != flight.task.node:
            rank_zero_warn(f"round {round_idx + 1}: reply for client {cid} refused: it comes from another node")
            rounds.fail(cid)
            return
        if (why := unbound(flight.task, msg)) is not None:
            rank_zero_warn(f"round {round_idx + 1}: reply for client {cid} refused: {why}")
            rounds.fail(cid)
            return
        if msg.has_error():
            rank_zero_warn(f"round {round_idx + 1}: client {cid} failed and is left out: {msg.error.reason}")
            rounds.fail(cid)
            return
        try:
            update = checked_update(flight.task, msg, self.fed.limits, compressed=rounds.compressor is not None)
        except (AggregationError, ValueError) as err:
            rounds.reject(cid, str(err))
            return
        rounds.receive(update)
        tau = self.fedbuff.version - flight.version
        stale = self.fedbuff.max_staleness is not None and tau > self.fedbuff.max_staleness
        if cid not in rounds.rejected and not stale:  # FedBuff drops (and counts) a too-stale one
            self.admitted.append(tau)

    def _join(self, flight: Flight) -> None:
        """``flight``'s client joins the open step: listed in arrival order, its download counted
        (FedBuff sends the model of the client's start version again)."""
        self.taken.add(flight.task.client)
        self.server.join(flight.task.client)
