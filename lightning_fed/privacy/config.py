"""The ``privacy`` settings of a run, validated once, and the plan they give before training."""

from __future__ import annotations

from dataclasses import dataclass

from lightning_fed.privacy.accountant import MECHANISMS, PrivacyAccountant, accounted_sample_rate


@dataclass
class PrivacyConfig:
    """Client-level privacy budget of a federation.

    Attributes:
        target_epsilon: Budget ``epsilon`` for the whole run. Alone, ``noise_multiplier`` is
            calibrated for the planned rounds before training; with ``noise_multiplier``, the
            run stops before the round that would exceed it.
        noise_multiplier: ``z`` given directly; alone, epsilon is only reported.
        delta: ``delta`` of the guarantee; ``None`` takes ``1 / N**1.1`` for ``N`` clients
            (below ``1 / N``, so that "leak one client's data" is not within ``delta``).
        accountant: ``rdp`` or ``prv`` (Opacus).
    """

    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    delta: float | None = None
    accountant: str = "rdp"

    def __post_init__(self) -> None:
        problems = []
        if self.target_epsilon is None and self.noise_multiplier is None:
            problems.append("give federation.privacy.target_epsilon, federation.privacy.noise_multiplier or both")
        if self.target_epsilon is not None and not self.target_epsilon > 0:
            problems.append(f"federation.privacy.target_epsilon must be > 0, got {self.target_epsilon!r}")
        if self.noise_multiplier is not None and not self.noise_multiplier > 0:
            problems.append(f"federation.privacy.noise_multiplier must be > 0, got {self.noise_multiplier!r}")
        if self.delta is not None and not 0 < self.delta < 1:
            problems.append(f"federation.privacy.delta must be in (0, 1), got {self.delta!r}")
        if self.accountant not in MECHANISMS:
            problems.append(f"federation.privacy.accountant must be one of {MECHANISMS}, got {self.accountant!r}")
        if problems:
            raise ValueError("; ".join(problems))

    def delta_for(self, num_clients: int) -> float:
        """``delta``, or ``1 / N**1.1``."""
        return float(self.delta) if self.delta is not None else 1.0 / float(num_clients) ** 1.1

    def plan(
        self, num_clients: int, rounds: int, sampling: str, clients_per_round: int = 0, sampling_rate: float = 0.0
    ) -> PrivacyAccountant:
        """The accountant of the run, with ``z`` calibrated when a budget is given (before training).

        Raises:
            ValueError: A bad sampler setting, or a budget no noise multiplier can meet (one line).
        """
        q = accounted_sample_rate(sampling, num_clients, clients_per_round, sampling_rate)
        delta = self.delta_for(num_clients)
        if self.noise_multiplier is None:
            return PrivacyAccountant.calibrated(self.target_epsilon, delta, q, rounds, self.accountant)
        return PrivacyAccountant(float(self.noise_multiplier), q, delta, self.target_epsilon, self.accountant)
