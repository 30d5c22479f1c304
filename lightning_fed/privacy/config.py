"""The ``privacy`` settings of a run, validated once, and the plan they give before training."""

from __future__ import annotations

from dataclasses import dataclass

from lightning_fed.dp_sgd_rules import positive_number as positive_number  # one definition, no torch
from lightning_fed.federation_rules import privacy_problems
from lightning_fed.noise_calibration import MAX_DEFAULT_DELTA as MAX_DEFAULT_DELTA  # no torch, one definition
from lightning_fed.noise_calibration import default_delta as default_delta
from lightning_fed.privacy.accountant import PrivacyAccountant, accounted_sample_rate


@dataclass
class PrivacyConfig:
    """The run's privacy settings: the client-level budget, ``delta``, and what is reported.

    Attributes:
        target_epsilon: Client-level budget ``epsilon`` for the whole run. Alone,
            ``noise_multiplier`` is calibrated for the planned rounds before training; with
            ``noise_multiplier``, the run stops before the round that would exceed it.
        noise_multiplier: Client-level ``z`` given directly; alone, epsilon is only reported.
            Neither of the two: no client-level DP (e.g. DP-SGD alone, with this ``delta``).
        delta: ``delta`` of every guarantee of the run (client level and DP-SGD's); ``None``
            takes ``min(1 / N**1.1, 1e-5)`` for ``N`` clients (:func:`default_delta`).
        accountant: ``rdp`` or ``prv`` (Opacus).
        report_validation: With DP on, report the example-weighted validation means over the
            evaluated clients (an unprotected channel, listed as such in the privacy report);
            by default nothing computed on the clients' validation data is written.
    """

    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    delta: float | None = None
    accountant: str = "rdp"
    report_validation: bool = False

    def __post_init__(self) -> None:
        # the rules the precheck applies before torch (lightning_fed/federation_rules.py)
        problems = privacy_problems(self.__dict__)
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def client_level(self) -> bool:
        """Whether the section sets client-level DP (a budget or a noise multiplier)."""
        return self.target_epsilon is not None or self.noise_multiplier is not None

    def delta_for(self, num_clients: int) -> float:
        """``delta``, or :func:`default_delta`."""
        return float(self.delta) if self.delta is not None else default_delta(num_clients)

    def plan(
        self, num_clients: int, rounds: int, sampling: str, clients_per_round: int = 0, sampling_rate: float = 0.0
    ) -> PrivacyAccountant:
        """The client-level accountant of the run, with ``z`` calibrated when only a budget is given
        (before training).

        Raises:
            ValueError: A bad sampler setting, no client-level setting, or a budget no noise
                multiplier can meet (one line).
        """
        if not self.client_level:
            raise ValueError(
                "client-level DP needs federation.privacy.target_epsilon, federation.privacy.noise_multiplier or both"
            )
        q = accounted_sample_rate(sampling, num_clients, clients_per_round, sampling_rate)
        delta = self.delta_for(num_clients)
        if self.noise_multiplier is None:
            return PrivacyAccountant.calibrated(self.target_epsilon, delta, q, rounds, self.accountant)
        return PrivacyAccountant(float(self.noise_multiplier), q, delta, self.target_epsilon, self.accountant)
