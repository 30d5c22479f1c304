"""How fast and how reliable each simulated client is: from a distribution or a trace file.

A :class:`ClientProfile` gives a client's virtual seconds per local step, the probability it
is online when the server picks it, and the probability it drops out during a round. Profiles
are drawn by :func:`profiles_from_distribution` (an exact share of slow clients, chosen by a
seeded permutation, so "30% slow" means 30% in every run) or read from a CSV trace
(:func:`load_trace`, columns ``client,step_time,availability,dropout``; measured elsewhere,
e.g. from device logs).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lightning_fed.federation.sampling import derive_seed
from lightning_fed.limits import MAX_LOCAL_STEPS

TRACE_COLUMNS = ("client", "step_time", "availability", "dropout")
_PROFILE_TAG = 0x5359  # keeps these draws apart from the sampler's


@dataclass(frozen=True)
class ClientProfile:
    """One client's system behaviour on the virtual clock.

    Attributes:
        step_time: Virtual seconds one local step takes (> 0).
        availability: Probability the client is online when selected, in ``[0, 1]``.
        dropout: Probability an online client drops out before reporting, in ``[0, 1]``.
    """

    step_time: float
    availability: float = 1.0
    dropout: float = 0.0

    def problems(self, where: str) -> list[str]:
        """What is wrong with this profile, each naming ``where`` it came from."""
        out = []
        if not self.step_time > 0:
            out.append(f"{where}: step_time must be > 0, got {self.step_time!r}")
        for name in ("availability", "dropout"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                out.append(f"{where}: {name} must be in [0, 1], got {value!r}")
        return out


def profiles_from_distribution(
    num_clients: int,
    step_time: float = 1.0,
    slow_fraction: float = 0.0,
    slow_factor: float = 10.0,
    availability: float = 1.0,
    dropout: float = 0.0,
    seed: int = 0,
    where: str = "system profile",
) -> list[ClientProfile]:
    """``round(slow_fraction * N)`` clients ``slow_factor`` times slower, the rest at ``step_time``.

    Which clients are slow is a seeded permutation (the same seed, the same slow clients). The
    same ``availability`` and ``dropout`` hold for every client, so ``availability: 0`` or
    ``dropout: 1`` would leave no client that ever reports: both are refused.

    Raises:
        ValueError: One line naming each bad argument (prefixed by ``where``, the config key).
    """
    problems = ClientProfile(step_time, availability, dropout).problems(where)
    if availability == 0.0:
        problems.append(f"{where}: availability must be > 0 (no client would ever be online), got {availability!r}")
    if dropout == 1.0:
        problems.append(f"{where}: dropout must be < 1 (every client would drop out), got {dropout!r}")
    if not 0.0 <= slow_fraction <= 1.0:
        problems.append(f"{where}: slow_fraction must be in [0, 1], got {slow_fraction!r}")
    if not slow_factor >= 1.0:
        problems.append(f"{where}: slow_factor must be >= 1, got {slow_factor!r}")
    if problems:
        raise ValueError("; ".join(problems))
    rng = np.random.default_rng(derive_seed(seed, _PROFILE_TAG))
    slow = set(rng.permutation(num_clients)[: round(slow_fraction * num_clients)].tolist())
    return [
        ClientProfile(step_time * (slow_factor if c in slow else 1.0), availability, dropout)
        for c in range(num_clients)
    ]


def load_trace(path: str | Path, num_clients: int) -> list[ClientProfile]:
    """Profiles from a CSV trace with a header ``client,step_time,availability,dropout``.

    Every client ``0 .. num_clients - 1`` must have exactly one row.

    Raises:
        ValueError: One line naming the file, the line and the column that is wrong.
    """
    rows: dict[int, ClientProfile] = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in TRACE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"trace {path}: missing column(s) {missing}; expected {list(TRACE_COLUMNS)}")
        for line, row in enumerate(reader, start=2):
            try:
                client = int(row["client"])
                profile = ClientProfile(float(row["step_time"]), float(row["availability"]), float(row["dropout"]))
            except ValueError as err:
                raise ValueError(f"trace {path} line {line}: {err}") from None
            problems = profile.problems(f"trace {path} line {line}")
            if not 0 <= client < num_clients:
                problems.append(f"trace {path} line {line}: client {client} not in [0, {num_clients})")
            elif client in rows:
                problems.append(f"trace {path} line {line}: client {client} given twice")
            if problems:
                raise ValueError("; ".join(problems))
            rows[client] = profile
    absent = [c for c in range(num_clients) if c not in rows]
    if absent:
        raise ValueError(f"trace {path}: no row for client(s) {absent[:5]} of data.num_clients={num_clients}")
    if all(p.availability == 0.0 or p.dropout == 1.0 for p in rows.values()):
        raise ValueError(f"trace {path}: no client ever reports (each has availability 0 or dropout 1)")
    return [rows[c] for c in range(num_clients)]


@dataclass(frozen=True)
class SystemProfile:
    """How the federation's clients behave: what the stragglers' and FedBuff's hooks both take.

    Attributes:
        local_steps: Steps of a full turn as the clock counts them: ``federation.local_steps``.
        step_time: Virtual seconds one local step takes on a normal client.
        slow_fraction: Share of clients that are ``slow_factor`` times slower (seeded choice).
        slow_factor: How much slower the slow clients are.
        availability: Probability a selected client is online.
        dropout: Probability an online client drops out before reporting.
        trace: A CSV file ``client,step_time,availability,dropout`` (replaces the five above).
        seed: Seed of the slow clients' choice and of the availability and dropout draws.
        where: The config key errors are named by (the hook holding this profile).

    Raises:
        ValueError: On construction, one line naming every bad field.
    """

    local_steps: int = 10
    step_time: float = 1.0
    slow_fraction: float = 0.0
    slow_factor: float = 10.0
    availability: float = 1.0
    dropout: float = 0.0
    trace: str | None = None
    seed: int = 0
    where: str = field(default="system profile", compare=False)

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.local_steps <= MAX_LOCAL_STEPS:
            problems.append(f"{self.where}: local_steps must be in [1, {MAX_LOCAL_STEPS}], got {self.local_steps!r}")
        try:
            profiles_from_distribution(1, **self._distribution(), where=self.where)
        except ValueError as err:
            problems.append(str(err))
        if problems:
            raise ValueError("; ".join(problems))

    def _distribution(self) -> dict[str, float | int]:
        return {
            "step_time": self.step_time,
            "slow_fraction": self.slow_fraction,
            "slow_factor": self.slow_factor,
            "availability": self.availability,
            "dropout": self.dropout,
            "seed": self.seed,
        }

    def profiles(self, num_clients: int) -> list[ClientProfile]:
        """Every client's :class:`ClientProfile`: from the trace if one is given, else drawn."""
        if self.trace:
            return load_trace(self.trace, num_clients)
        return profiles_from_distribution(num_clients, **self._distribution(), where=self.where)
