"""FedBuff's asynchronous rounds on the virtual clock: the round hook that decides who arrives.

With :class:`AsyncArrivals` in ``federation.hooks`` and :class:`~lightning_fed.strategies.FedBuff`
as the strategy, a "round" of the loop is one server step of FedBuff (Nguyen et al., 2022,
arXiv:2106.06639, Algorithm 1): an :class:`~lightning_fed.heterogeneity.AsyncRoundSimulator`
keeps ``concurrency`` clients training at all times on the virtual clock; before each round the
hook takes the next arrivals, up to what fills the buffer (``buffer_size`` minus what is already
in it), and makes them the round's clients, in arrival order. Each trained from the model of
the version that was current when it was dispatched: the strategy keeps those models
(:meth:`~lightning_fed.strategies.FedBuff.remember`, ``keep_versions``) and sends each client its
own (``client_model``), and ``aggregate`` discounts each update by its staleness. A client that
would arrive twice in one round closes the round early (its second update opens the next one).
``federation.clients_per_round`` is not used for the choice (it must still be valid).

``arrivals`` says whose clock orders the updates. ``"virtual"`` (the default): the virtual clock's,
in both transports (the hook runs on the server), so a Flower run trains the same clients from the
same versions as the in-process run. ``"real"``: the order in which a Flower deployment's replies
really arrive: :mod:`lightning_fed.deploy.train_rounds.buffered` keeps ``concurrency`` clients in flight
and steps each time ``buffer_size`` replies are in; the profiles (speeds, availability, dropouts)
are then the nodes' own, not drawn. In one process clients train one after another, so there is no
arrival order to take: ``arrivals: real`` is refused there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_fed.federation.hooks import Capability, RoundHook
from lightning_fed.heterogeneity.system_profiles import SystemProfile
from lightning_fed.heterogeneity.virtual_clock import Arrival, AsyncRoundSimulator
from lightning_fed.hook_rules import ASYNC_ARRIVALS, buffer_below_line, concurrency_problem, wrapped_strategy_problem
from lightning_fed.value_rules import check

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.hooks import ServerRound

FIELD = "federation.hooks: AsyncArrivals"
ARRIVALS = ("virtual", "real")


class AsyncArrivals(RoundHook):
    """Asynchronous arrivals for FedBuff on the virtual clock.

    Args:
        concurrency: Clients training at once (``C``).
        local_steps: Steps of a client's task as the clock counts them: ``federation.local_steps``.
        step_time: Virtual seconds of one local step on a normal client. This and the next five
            are the clients' profiles, as for :class:`~lightning_fed.heterogeneity.SystemHeterogeneity`
            (virtual arrivals only).
        slow_fraction: Share of the clients that are slow.
        slow_factor: How many times slower a slow client is.
        availability: Probability that a dispatched client is online.
        dropout: Probability that a client drops out before its reply.
        trace: A CSV file of per-client profiles (instead of the five options above).
        seed: Seed of the profiles' draws and of which idle client a real-arrival server dispatches.
        arrivals: ``"virtual"`` (the virtual clock orders the updates) or ``"real"`` (a Flower
            deployment's replies, in the order they arrive; see the module docstring).
    """

    #: Its moments are the server's (arrival times): nothing runs in a client's turn.
    capabilities = frozenset({Capability.BATCH_SAFE})

    def __init__(
        self,
        concurrency: int = 4,
        local_steps: int = 10,
        step_time: float = 1.0,
        slow_fraction: float = 0.0,
        slow_factor: float = 10.0,
        availability: float = 1.0,
        dropout: float = 0.0,
        trace: str | None = None,
        seed: int = 0,
        arrivals: str = "virtual",
    ) -> None:
        if arrivals not in ARRIVALS:
            raise ValueError(f"{FIELD}: arrivals must be one of {ARRIVALS}, got {arrivals!r}")
        profile = {"local_steps": local_steps, "step_time": step_time, "slow_fraction": slow_fraction}
        profile.update(slow_factor=slow_factor, availability=availability, dropout=dropout)
        check(
            ASYNC_ARRIVALS, concurrency=concurrency, seed=seed, **profile
        )  # lightning_fed/hook_rules.py: the precheck's too
        self.arrivals = arrivals
        #: Set by a transport that really keeps clients in flight (:mod:`lightning_fed.deploy.train_rounds.buffered`).
        self.concurrent = False
        self.concurrency, self.seed = concurrency, seed
        self.system = SystemProfile(
            local_steps, step_time, slow_fraction, slow_factor, availability, dropout, trace, seed, FIELD
        )  # validates the arguments now
        self.sim: AsyncRoundSimulator | None = None
        self.pending: Arrival | None = None  # an arrival that opens the next round
        self.clock = 0.0  # virtual time, or with real arrivals the wall-clock seconds of the run
        self.dispatches = self.timed_out = 0  # real arrivals: clients dispatched, replies never received
        self._sim_state: dict[str, Any] = {}

    def server_path(self) -> str | None:
        """``"buffered"`` with ``arrivals: real`` (the Flower server keeps clients in flight)."""
        return "buffered" if self.arrivals == "real" else None

    def check_run(self, run: Any) -> None:
        """The strategy is FedBuff, not wrapped (found from the ``federation:`` section, before the model loads)."""
        strategy = run.strategy
        if not callable(getattr(strategy, "keep_versions", None)):
            inner = getattr(strategy, "strategy", None)
            if callable(getattr(inner, "keep_versions", None)):
                raise ValueError(wrapped_strategy_problem(FIELD, "AsyncArrivals", type(strategy).__name__))
            raise ValueError(f"{FIELD} needs federation.strategy=FedBuff, got {type(strategy).__name__}")

    def check_server(self, server: ServerRound) -> None:
        """When the run is bound, before anything is written: the strategy must be FedBuff (not
        wrapped: client-level DP accounts synchronous sampled rounds, which arrivals replace),
        ``arrivals: real`` needs Flower (the Flower transport decides at setup whether its clients
        really train concurrently), ``concurrency`` and the profiles must fit the clients, and
        FedBuff's ``buffer_size`` must reach ``federation.min_clients`` (a step takes that many)."""
        self.check_run(server)
        if self.arrivals == "real":
            if server.engine != "flower":
                raise ValueError(self._not_concurrent)
            return
        if problem := concurrency_problem(FIELD, self.concurrency, server.num_clients):  # the precheck's too
            raise ValueError(problem)
        fixed = getattr(server, "sampling", "fixed_size") == "fixed_size"  # Poisson: min(min_clients, arrived)
        if fixed and server.strategy.buffer_size < server.min_clients:  # a step takes buffer_size (the precheck's)
            raise ValueError(buffer_below_line(server.strategy.buffer_size, server.min_clients))
        self._simulator(server.num_clients)

    def _simulator(self, num_clients: int) -> AsyncRoundSimulator:
        try:
            return AsyncRoundSimulator(
                self.system.profiles(num_clients), self.system.local_steps, self.concurrency, self.seed
            )
        except ValueError as err:
            raise ValueError(f"{FIELD}: {err}") from None

    _not_concurrent = (
        f"{FIELD}: arrivals=real needs clients that train concurrently (a Flower deployment); in one"
        " process they train one after another: use arrivals=virtual"
    )

    def setup_server(self, server: ServerRound, context: RoundContext, module: pl.LightningModule) -> None:
        if not callable(getattr(server.strategy, "keep_versions", None)):
            raise ValueError(f"{FIELD} needs federation.strategy=FedBuff, got {type(server.strategy).__name__}")
        if self.arrivals == "real":
            if not self.concurrent:
                raise ValueError(self._not_concurrent)
            return  # the replies' real order decides: no virtual clock
        self.sim = self._simulator(server.num_clients)
        if self._sim_state:
            self.sim.load_state_dict(self._sim_state)

    def on_round_start(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> None:
        if self.arrivals == "real":
            return  # the transport dispatches and collects (deploy/train_rounds/buffered.py)
        fedbuff = server.strategy
        fedbuff.remember(server.global_state)
        want = fedbuff.buffer_size - fedbuff.buffered
        arrivals: list[Arrival] = []
        while len(arrivals) < want:
            a, self.pending = self.pending or self.sim.next_arrival(fedbuff.version), None
            if any(a.client == b.client for b in arrivals):
                self.pending = a  # the client's second update: the next round's first
                break
            arrivals.append(a)
        for a in arrivals:
            fedbuff.assign(a.client, a.start_version)
        clients[:] = [a.client for a in arrivals]
        self.clock = arrivals[-1].time
        needed = {a.start_version for a in arrivals} | {entry[3] for entry in self.sim.running} | {fedbuff.version}
        if self.pending is not None:
            needed.add(self.pending.start_version)
        fedbuff.keep_versions(needed)
        self.log_step(context, round_idx, [fedbuff.version - a.start_version for a in arrivals])

    def log_step(self, context: Any, round_idx: int, staleness: list[int]) -> None:
        """Log server step ``round_idx``: ``system/virtual_time`` (virtual arrivals) or
        ``system/wall_time`` (real arrivals, seconds since the run's first dispatch: :attr:`clock`)
        and ``system/staleness``, the mean staleness of the updates it aggregates."""
        name = "system/virtual_time" if self.arrivals == "virtual" else "system/wall_time"
        metrics = {name: self.clock, "system/staleness": sum(staleness) / max(len(staleness), 1)}
        for logger in getattr(context, "loggers", []) or []:
            logger.log_metrics(metrics, step=round_idx + 1)

    def summary(self) -> dict[str, Any]:
        if self.arrivals == "real":
            return {
                "arrivals": "real",
                "wall_time": self.clock,
                "dispatched": self.dispatches,
                "timed_out": self.timed_out,
            }
        return {"virtual_time": self.clock, "dropped": self.sim.dropped if self.sim else 0}

    def state_dict(self) -> dict[str, Any]:
        pending = None
        if self.pending is not None:
            p = self.pending
            pending = [p.client, p.start_time, p.time, p.start_version]
        sim = self.sim.state_dict() if self.sim is not None else self._sim_state
        return {
            "clock": self.clock,
            "pending": pending,
            "sim": sim,
            "dispatches": self.dispatches,
            "timed_out": self.timed_out,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clock = float(state.get("clock", 0.0))
        self.dispatches = int(state.get("dispatches", 0))
        self.timed_out = int(state.get("timed_out", 0))
        p = state.get("pending")
        self.pending = None if p is None else Arrival(int(p[0]), float(p[1]), float(p[2]), int(p[3]))
        self._sim_state = dict(state.get("sim", {}))
        if self.sim is not None and self._sim_state:
            self.sim.load_state_dict(self._sim_state)
