"""Slow, absent and vanishing clients in a synchronous run: the round hook that drives the virtual clock.

:class:`SystemHeterogeneity` (a ``federation.hooks`` entry) gives every client a
:class:`~lightning_fed.heterogeneity.ClientProfile` (from a distribution or a trace file) and runs
a :class:`~lightning_fed.heterogeneity.SyncRoundSimulator` over each round's sampled clients
before the round starts (``on_round_start``): only the clients whose update reaches the server
in time train, each for the local steps it finished (partial work: the straggler's instruction
``local_steps``), and the round's virtual end time is logged (``system/virtual_time``). Offline,
dropped and late clients are counted (``summary.json``: ``hooks.SystemHeterogeneity``) and left
out of the round; a round left with fewer than ``federation.min_clients`` reporting clients fails
(``RuntimeError``) as any round does.

Over-selection (Bonawitz et al., 2019, arXiv:1902.01046, Sec. 2.2): ``federation.clients_per_round``
is the number *selected*; the round closes at ``target`` reports (``None``: all selected), so
``clients_per_round = ceil(target * 1.3)`` is the paper's 30%.

With ``clock: virtual`` (the default) everything here is a pure function of ``(seed, round,
client)`` and the profiles and runs on the server, so the same clients train in process and under
Flower (the Flower server's real ``timeout`` stays the transport's own bound; the deadline is
virtual seconds).

With ``clock: wall`` (Flower only) the same options act on real time-outs: the Flower server
(``deploy/train_rounds/wall_clock.py``) waits at most ``deadline`` wall seconds for the round's replies and
aggregates those that arrived, the first ``target`` of them (over-selection); a client that has not
answered by then is late (not failed), and its reply, if it comes later, answers an earlier round's
message and is refused. With ``partial_work`` each client is sent a time budget
(``deadline * (1 - reply_margin)`` seconds from the moment its train message arrives) and stops its
local steps when it is spent, uploading the steps it finished (at least one), which it reports as
the ``local_steps`` metric (and ``cut_short``: whether the budget ended its turn). The clients are
as fast and as available as they really are: the profile options (``step_time`` ... ``trace``)
belong to the virtual clock and are refused with ``clock: wall``, as is ``clock: wall`` in process
(its clients train one after another, so a wall deadline would cut a client by its place in the
queue, not by its speed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_fed.errors import UserError
from lightning_fed.federation.hooks import Capability, Payload, RoundHook
from lightning_fed.heterogeneity.system_profiles import SystemProfile
from lightning_fed.heterogeneity.virtual_clock import SyncRoundSimulator
from lightning_fed.hook_rules import SYSTEM_HETEROGENEITY, target_below_line
from lightning_fed.value_rules import check

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.hooks import ServerRound

#: The instruction key a straggler's partial work travels under (read by :func:`instructed_steps`).
LOCAL_STEPS = "local_steps"
#: The instruction key of a client's wall-clock time budget in seconds (read by :func:`instructed_budget`).
WALL_BUDGET = "wall_budget"
#: The update metric by which a client says its time budget ended its turn early (1.0) or not (0.0).
CUT_SHORT = "cut_short"
FIELD = "federation.hooks: SystemHeterogeneity"


def instructed_steps(instructions: dict[int, Payload], default: int | None) -> int | None:
    """The local steps a client runs this round: the fewest any hook's instruction asks for
    (``LOCAL_STEPS``), else ``default`` (``federation.local_steps``)."""
    asked = [int(p[LOCAL_STEPS]) for p in instructions.values() if LOCAL_STEPS in p]
    return min([*asked, default]) if asked and default is not None else default


def instructed_budget(instructions: dict[int, Payload]) -> float | None:
    """The wall seconds a client may train this round: the least any hook's instruction gives
    (``WALL_BUDGET``), else ``None`` (no limit)."""
    given = [float(p[WALL_BUDGET]) for p in instructions.values() if WALL_BUDGET in p]
    return min(given) if given else None


class SystemHeterogeneity(RoundHook):
    """Per-client speed, availability and dropouts on a virtual clock, with a round deadline.

    Args:
        local_steps: Steps of a full turn as the clock counts them (``federation.local_steps``). This
            and the next seven are the clients' behaviour, held as one
            :class:`~lightning_fed.heterogeneity.SystemProfile` (``self.system``).
        step_time: Virtual seconds of one local step on a normal client.
        slow_fraction: Share of the clients that are ``slow_factor`` times slower (a seeded choice).
        slow_factor: How many times slower a slow client is.
        availability: Probability that a selected client is online.
        dropout: Probability that an online client drops out before reporting.
        trace: A CSV file ``client,step_time,availability,dropout`` (instead of the five options above).
        seed: Seed of the slow clients' choice and of the availability and dropout draws.
        deadline: Seconds a round may last, virtual or wall (``clock``); ``None``: no deadline.
        target: Reports that close the round (``None``: every selected client).
        partial_work: At the deadline, stragglers send the steps they finished.
        clock: ``virtual`` (simulated seconds, both transports, deterministic) or ``wall`` (real
            time-outs, Flower only; see the module docstring).
        reply_margin: With ``clock: wall`` and ``partial_work``: the share of the deadline left for
            the upload (a client trains at most ``deadline * (1 - reply_margin)`` seconds).
    """

    #: A client's step count comes with its instruction (clients with different counts train in
    #: different groups); nothing else of it runs in a client's turn.
    capabilities = frozenset({Capability.BATCH_SAFE})

    def __init__(
        self,
        local_steps: int = 10,
        step_time: float = 1.0,
        slow_fraction: float = 0.0,
        slow_factor: float = 10.0,
        availability: float = 1.0,
        dropout: float = 0.0,
        trace: str | None = None,
        deadline: float | None = None,
        target: int | None = None,
        partial_work: bool = False,
        seed: int = 0,
        clock: str = "virtual",
        reply_margin: float = 0.2,
    ) -> None:
        # lightning_fed/hook_rules.py: the precheck refuses these with the same line, before torch
        check(SYSTEM_HETEROGENEITY, target=target, clock=clock, reply_margin=reply_margin, deadline=deadline, seed=seed)
        profile = {"local_steps": local_steps, "step_time": step_time, "slow_fraction": slow_fraction}
        check(SYSTEM_HETEROGENEITY, **profile, slow_factor=slow_factor, availability=availability, dropout=dropout)
        virtual_only = {"step_time": 1.0, "slow_fraction": 0.0, "availability": 1.0, "dropout": 0.0, "trace": None}
        given = {"step_time": step_time, "slow_fraction": slow_fraction, "availability": availability}
        given.update({"dropout": dropout, "trace": trace})
        if clock == "wall" and (changed := [k for k, v in given.items() if v != virtual_only[k]]):
            raise ValueError(
                f"{FIELD}.clock='wall' takes the clients' real speed and availability; {', '.join(changed)}"
                " belong to clock='virtual'"
            )
        self.clock_kind, self.reply_margin = clock, float(reply_margin)
        self.system = SystemProfile(
            local_steps, step_time, slow_fraction, slow_factor, availability, dropout, trace, seed, FIELD
        )  # validates the arguments now
        self.deadline, self.target, self.partial_work = deadline, target, partial_work
        self.sim: SyncRoundSimulator | None = None
        self.round_target = 0  # reports that close the current round
        self.clock = 0.0
        self.counts = {"unavailable": 0, "dropped": 0, "late": 0, "partial": 0}
        self._steps: dict[int, int] = {}  # this round's partial workers: client -> steps
        self._name = FIELD  # federation.hooks[i] once bound (check_server)

    @property
    def wall(self) -> bool:
        """Whether the deadline is wall seconds (real time-outs over Flower)."""
        return self.clock_kind == "wall"

    def server_path(self) -> str | None:
        """``"wall_clock"`` with ``clock: wall`` (the Flower server closes a round at its deadline)."""
        return "wall_clock" if self.wall else None

    def check_server(self, server: ServerRound) -> None:
        """When the run is bound, before anything is written: ``clock: wall`` in process, a
        ``target`` above the clients a round selects or below ``min_clients`` (a round closes at its
        target-th report), and the clients' profiles (a trace file read now) are checked."""
        hooks = list(getattr(server, "hooks", None) or [])
        if (index := next((i for i, h in enumerate(hooks) if h is self), None)) is not None:
            self._name = f"federation.hooks[{index}]"
        self._check_engine(server.engine)
        clients_per_round = getattr(server, "clients_per_round", server.num_clients)
        poisson = getattr(server, "sampling", "fixed_size") == "poisson"
        if poisson:
            clients_per_round = server.num_clients  # a Poisson round selects any number of clients
        if self.target is not None and self.target > clients_per_round:
            raise ValueError(
                f"{FIELD}.target={self.target} exceeds federation.clients_per_round={clients_per_round} (the selected)"
            )
        if self.target is not None and not poisson and self.target < server.min_clients:  # as the precheck
            raise ValueError(f"{FIELD}.{target_below_line(self.target, server.min_clients)}")
        self.system.profiles(server.num_clients)

    def _check_engine(self, engine: str) -> None:
        if self.wall and engine != "flower":  # the user's to fix: exit 2, one line (red team 17 B22)
            raise UserError(
                f"{self._name}.clock='wall' runs over Flower only: in process the clients train one after another,"
                " so a wall-clock deadline would cut them by their place in the queue; use clock='virtual'"
            )

    def setup_server(self, server: ServerRound, context: RoundContext, module: pl.LightningModule) -> None:
        self._check_engine(context.engine)  # the bound run's check (check_server), in case it was not bound
        system = self.system
        profiles = system.profiles(server.num_clients)
        self.sim = SyncRoundSimulator(
            profiles, system.local_steps, self.deadline, 0.0, self.partial_work, 1, system.seed
        )

    def on_round_start(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> None:
        target = len(clients) if self.target is None else min(self.target, len(clients))
        self.round_target = target
        if self.wall:  # who reports is decided by the real replies (deploy/train_rounds/wall_clock.py)
            return
        outcome = self.sim.run_round(round_idx, list(clients), target, start=self.clock)
        reporting = {r.client: r for r in outcome.reports}
        if len(reporting) < server.min_clients:  # as ServerRound.close would, before an empty round is laid out
            raise RuntimeError(
                f"round {round_idx + 1}: only {len(reporting)} of {len(clients)} selected clients reported in time,"
                f" fewer than federation.min_clients={server.min_clients} (unavailable: {outcome.unavailable},"
                f" dropped: {outcome.dropped}, late: {outcome.late})"
            )
        self._steps = {r.client: r.steps for r in outcome.reports if r.partial}
        clients[:] = [c for c in clients if c in reporting]
        self.clock = outcome.end
        for key in ("unavailable", "dropped", "late"):
            self.counts[key] += len(getattr(outcome, key))
        self.counts["partial"] += len(self._steps)
        metrics = {
            "system/virtual_time": outcome.end,
            "system/reports": float(len(outcome.reports)),
            "system/unavailable": float(len(outcome.unavailable)),
            "system/dropped": float(len(outcome.dropped)),
            "system/late": float(len(outcome.late)),
        }
        for logger in getattr(context, "loggers", []) or []:
            logger.log_metrics(metrics, step=round_idx + 1)

    def client_instruction(self, server: ServerRound, client_id: int, round_idx: int) -> Payload:
        if self.wall:
            if self.partial_work and self.deadline is not None:
                return {WALL_BUDGET: self.deadline * (1.0 - self.reply_margin)}
            return {}
        steps = self._steps.get(client_id)
        return {} if steps is None else {LOCAL_STEPS: steps}

    def record_wall_round(
        self, context: RoundContext, round_idx: int, reports: int, partial: list[int], late: list[int], seconds: float
    ) -> None:
        """What a wall-clock round came to: its aggregated ``reports``, the ``partial`` clients among
        them (their budget cut their turn short), the ``late`` clients (no reply by the deadline, or
        past the target) and its wall ``seconds``."""
        self.clock += seconds
        self.counts["late"] += len(late)
        self.counts["partial"] += len(partial)
        metrics = {
            "system/wall_time": self.clock,
            "system/reports": float(reports),
            "system/late": float(len(late)),
            "system/partial": float(len(partial)),
        }
        for logger in context.loggers:
            logger.log_metrics(metrics, step=round_idx + 1)

    def summary(self) -> dict[str, Any]:
        return {"wall_time" if self.wall else "virtual_time": self.clock, **self.counts}

    def state_dict(self) -> dict[str, Any]:
        return {"clock": self.clock, "counts": dict(self.counts), "steps": dict(self._steps)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clock = float(state.get("clock", 0.0))
        self.counts.update(state.get("counts", {}))
        self._steps = {int(k): int(v) for k, v in state.get("steps", {}).items()}
