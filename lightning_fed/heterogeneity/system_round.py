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

Everything here is a pure function of ``(seed, round, client)`` and the profiles and runs on the
server, so the same clients train in process and under Flower (the Flower server's real
``timeout`` stays the transport's own bound; the deadline is virtual seconds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_fed.federation.hooks import Payload, RoundHook
from lightning_fed.heterogeneity.system_profiles import SystemProfile
from lightning_fed.heterogeneity.virtual_clock import SyncRoundSimulator

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.hooks import ServerRound

#: The instruction key a straggler's partial work travels under (read by :func:`instructed_steps`).
LOCAL_STEPS = "local_steps"
FIELD = "federation.hooks: SystemHeterogeneity"


def instructed_steps(instructions: dict[int, Payload], default: int | None) -> int | None:
    """The local steps a client runs this round: the fewest any hook's instruction asks for
    (``LOCAL_STEPS``), else ``default`` (``federation.local_steps``)."""
    asked = [int(p[LOCAL_STEPS]) for p in instructions.values() if LOCAL_STEPS in p]
    return min([*asked, default]) if asked and default is not None else default


class SystemHeterogeneity(RoundHook):
    """Per-client speed, availability and dropouts on a virtual clock, with a round deadline.

    Args:
        local_steps, step_time, slow_fraction, slow_factor, availability, dropout, trace, seed: The
            clients' behaviour, held as one :class:`~lightning_fed.heterogeneity.SystemProfile`
            (``self.system``; its fields say what each is).
        deadline: Virtual seconds a round may last (``None``: no deadline).
        target: Reports that close the round (``None``: every selected client).
        partial_work: At the deadline, stragglers send the steps they finished.
    """

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
    ) -> None:
        if target is not None and target < 1:
            raise ValueError(f"{FIELD}.target must be >= 1, got {target!r}")
        self.system = SystemProfile(
            local_steps, step_time, slow_fraction, slow_factor, availability, dropout, trace, seed
        )  # validates the arguments now
        self.deadline, self.target, self.partial_work = deadline, target, partial_work
        self.sim: SyncRoundSimulator | None = None
        self.clock = 0.0
        self.counts = {"unavailable": 0, "dropped": 0, "late": 0, "partial": 0}
        self._steps: dict[int, int] = {}  # this round's partial workers: client -> steps

    def setup_server(self, server: ServerRound, context: RoundContext, module: pl.LightningModule) -> None:
        clients_per_round = getattr(server, "clients_per_round", server.num_clients)
        if self.target is not None and self.target > clients_per_round:
            raise ValueError(
                f"{FIELD}.target={self.target} exceeds federation.clients_per_round={clients_per_round} (the selected)"
            )
        system = self.system
        profiles = system.profiles(server.num_clients)
        self.sim = SyncRoundSimulator(
            profiles, system.local_steps, self.deadline, 0.0, self.partial_work, 1, system.seed
        )

    def on_round_start(
        self, server: ServerRound, trainer: Any, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> None:
        target = len(clients) if self.target is None else min(self.target, len(clients))
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
        for logger in getattr(trainer, "loggers", []) or []:
            logger.log_metrics(metrics, step=round_idx + 1)

    def client_instruction(self, server: ServerRound, client_id: int, round_idx: int) -> Payload:
        steps = self._steps.get(client_id)
        return {} if steps is None else {LOCAL_STEPS: steps}

    def summary(self) -> dict[str, Any]:
        return {"virtual_time": self.clock, **self.counts}

    def state_dict(self) -> dict[str, Any]:
        return {"clock": self.clock, "counts": dict(self.counts), "steps": dict(self._steps)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clock = float(state.get("clock", 0.0))
        self.counts.update(state.get("counts", {}))
        self._steps = {int(k): int(v) for k, v in state.get("steps", {}).items()}
