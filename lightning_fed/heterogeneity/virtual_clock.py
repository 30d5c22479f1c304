"""Rounds on a virtual clock: who reports, when, and with how much work done.

Pure Python over :class:`~lightning_fed.heterogeneity.ClientProfile` s; nothing is trained
here. The loop (later) asks a simulator which clients' updates count and how many local steps
each ran, trains exactly those, and logs the virtual time; so system heterogeneity changes the
*outcome* of a simulated run the way it would on devices, while the run stays deterministic
(every draw comes from ``derive_seed(seed, tag, round or dispatch, ...)``, nothing else).

* :class:`SyncRoundSimulator`: a synchronous round with a deadline and over-selection
  (Bonawitz et al., 2019, "Towards Federated Learning at Scale: System Design",
  arXiv:1902.01046, Sec. 2.2: select more devices than needed, close the round when enough
  have reported or at the deadline, discard the rest), dropouts, and partial work (a straggler
  sends what it finished by the deadline: FedProx's inexact updates, Li et al., 2020,
  arXiv:1812.06127).
* :class:`AsyncRoundSimulator`: ``concurrency`` clients always training; each arrival carries
  the server version it started from (the staleness :class:`~lightning_fed.strategies.FedBuff`
  discounts); a finished or dropped client's slot goes to an idle, available client.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_fed.federation.sampling import derive_seed
from lightning_fed.heterogeneity.system_profiles import ClientProfile

_SYNC_TAG, _ASYNC_TAG = 0x5943, 0x4143


@dataclass(frozen=True)
class Report:
    """An update that reaches the server in time: ``steps`` local steps, arrived at ``time``."""

    client: int
    steps: int
    time: float
    partial: bool = False


@dataclass(frozen=True)
class RoundOutcome:
    """What happened in one synchronous round.

    Attributes:
        start: Virtual time the round began.
        end: Virtual time it closed (the target-th report, the deadline, or the last report).
        reports: The updates aggregated, in arrival order.
        unavailable: Selected clients that were offline.
        dropped: Online clients that dropped out before reporting.
        late: Online clients whose update was not used (past the deadline, or surplus once
            the target was reached).
    """

    start: float
    end: float
    reports: list[Report]
    unavailable: list[int]
    dropped: list[int]
    late: list[int]


class SyncRoundSimulator:
    """Synchronous rounds with a deadline, over-selection, dropouts and partial work.

    Args:
        profiles: One :class:`ClientProfile` per client.
        local_steps: Steps a client runs when it is not cut short.
        deadline: Virtual seconds a round may last; ``None`` waits for every client that
            will report (up to the target).
        over_selection: Select ``ceil(target * (1 + over_selection))`` clients (Bonawitz et
            al. use 30%, ``0.3``).
        partial_work: At the deadline, a client still training sends the steps it finished.
        min_partial_steps: Fewest steps a partial update must hold to be used.
        seed: Seed of the availability and dropout draws.
    """

    def __init__(
        self,
        profiles: Sequence[ClientProfile],
        local_steps: int,
        deadline: float | None = None,
        over_selection: float = 0.0,
        partial_work: bool = False,
        min_partial_steps: int = 1,
        seed: int = 0,
    ) -> None:
        problems = []
        if local_steps < 1:
            problems.append(f"local_steps must be >= 1, got {local_steps!r}")
        if deadline is not None and not deadline > 0:
            problems.append(f"deadline must be > 0, got {deadline!r}")
        if not over_selection >= 0:
            problems.append(f"over_selection must be >= 0, got {over_selection!r}")
        if min_partial_steps < 1:
            problems.append(f"min_partial_steps must be >= 1, got {min_partial_steps!r}")
        if problems:
            raise ValueError("SyncRoundSimulator: " + "; ".join(problems))
        self.profiles = list(profiles)
        self.local_steps, self.deadline, self.over_selection = local_steps, deadline, over_selection
        self.partial_work, self.min_partial_steps, self.seed = partial_work, min_partial_steps, seed

    def num_to_select(self, target: int) -> int:
        """How many clients the sampler should pick for ``target`` reports (over-selection)."""
        return math.ceil(target * (1.0 + self.over_selection) - 1e-9)

    def run_round(self, round_idx: int, selected: Sequence[int], target: int, start: float = 0.0) -> RoundOutcome:
        """Simulate one round of ``selected`` clients that closes at ``target`` reports or the deadline."""
        unavailable, dropped, running = [], [], []
        for c in sorted(selected):
            p = self.profiles[c]
            u_avail, u_drop = np.random.default_rng(derive_seed(self.seed, _SYNC_TAG, round_idx, c)).random(2)
            if u_avail >= p.availability:
                unavailable.append(c)
            elif u_drop < p.dropout:
                dropped.append(c)
            else:
                running.append((self.local_steps * p.step_time, c))
        running.sort()
        on_time = [(t, c) for t, c in running if self.deadline is None or t <= self.deadline]
        reports = [Report(c, self.local_steps, start + t) for t, c in on_time[:target]]
        if len(reports) == target:
            end = reports[-1].time if reports else start
        elif self.deadline is None:
            end = reports[-1].time if reports else start
        else:
            end = start + self.deadline
            if self.partial_work:
                stragglers = [
                    (math.floor(self.deadline / self.profiles[c].step_time), c) for t, c in running[len(on_time) :]
                ]
                stragglers = sorted(
                    ((s, c) for s, c in stragglers if s >= self.min_partial_steps), key=lambda x: (-x[0], x[1])
                )
                reports += [Report(c, s, end, partial=True) for s, c in stragglers[: target - len(reports)]]
        used = {r.client for r in reports}
        late = [c for _, c in running if c not in used]
        return RoundOutcome(start, end, reports, unavailable, dropped, sorted(late))


@dataclass(frozen=True)
class Arrival:
    """An asynchronous update reaching the server at ``time``, trained from version ``start_version``."""

    client: int
    start_time: float
    time: float
    start_version: int


class AsyncRoundSimulator:
    """``concurrency`` clients training at all times; updates arrive in virtual-time order.

    Args:
        profiles: One :class:`ClientProfile` per client.
        local_steps: Steps each client runs per task.
        concurrency: Clients training at once (FedBuff's concurrency ``C``).
        seed: Seed of the draws (which idle client starts, availability, dropout).
    """

    def __init__(self, profiles: Sequence[ClientProfile], local_steps: int, concurrency: int, seed: int = 0) -> None:
        problems = []
        if local_steps < 1:
            problems.append(f"local_steps must be >= 1, got {local_steps!r}")
        if not 1 <= concurrency <= len(profiles):
            problems.append(f"concurrency must be in [1, {len(profiles)}] (the number of clients), got {concurrency!r}")
        if problems:
            raise ValueError("AsyncRoundSimulator: " + "; ".join(problems))
        self.profiles = list(profiles)
        self.local_steps, self.concurrency, self.seed = local_steps, concurrency, seed
        self.now = 0.0
        self.dispatches = 0  # draws so far: the counter every draw is derived from
        self.dropped = 0
        self.running: list[tuple[float, int, float, int, bool]] = []  # (time, client, start, version, drops)

    def next_arrival(self, version: int) -> Arrival:
        """Fill the free slots with clients starting from ``version`` now, then the next update to arrive.

        Raises:
            RuntimeError: If no client is training and none is available to start.
        """
        self._fill(version)
        while self.running:
            time, client, start, start_version, drops = heapq.heappop(self.running)
            self.now = time
            if drops:
                self.dropped += 1
                self._fill(version)
                continue
            return Arrival(client, start, time, start_version)
        raise RuntimeError(f"no client is training and none is available at virtual time {self.now}")

    def _fill(self, version: int) -> None:
        while len(self.running) < self.concurrency:
            busy = {entry[1] for entry in self.running}
            idle = [c for c in range(len(self.profiles)) if c not in busy]
            rng = np.random.default_rng(derive_seed(self.seed, _ASYNC_TAG, self.dispatches))
            self.dispatches += 1
            draws = rng.random(len(idle))
            available = [c for c, u in zip(idle, draws) if u < self.profiles[c].availability]
            if not available:
                return  # retried at the next event
            client = available[int(rng.integers(len(available)))]
            p = self.profiles[client]
            duration = self.local_steps * p.step_time
            u_drop, u_when = rng.random(2)
            drops = bool(u_drop < p.dropout)
            end = self.now + (duration * u_when if drops else duration)
            heapq.heappush(self.running, (end, client, self.now, version, drops))

    def state_dict(self) -> dict[str, Any]:
        """Plain Python state (virtual time, running clients, draw counter) to resume exactly."""
        return {
            "now": self.now,
            "dispatches": self.dispatches,
            "dropped": self.dropped,
            "running": [list(e) for e in self.running],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.now = float(state.get("now", self.now))
        self.dispatches = int(state.get("dispatches", self.dispatches))
        self.dropped = int(state.get("dropped", self.dropped))
        running = [(float(t), int(c), float(s), int(v), bool(d)) for t, c, s, v, d in state.get("running", [])]
        heapq.heapify(running)
        self.running = running
