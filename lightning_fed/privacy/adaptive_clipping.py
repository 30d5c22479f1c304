"""Adaptive clipping to a target quantile (Andrew, Thakkar, McMahan, Ramaswamy, 2021,
"Differentially Private Learning with Adaptive Clipping", NeurIPS, arXiv:1905.03871).

Each round the server learns whether each participant's update norm was at most the current
clip ``C`` (``b_i = 1[||Delta_i|| <= C]``), privatizes the count with its own Gaussian noise
and moves ``C`` geometrically towards the norm that a fraction ``gamma`` of updates stays
under (Algorithm 1, lines "b~" and "C <-"):

    b~ = (sum_i b_i + N(0, sigma_b^2)) / m
    C <- C * exp(-eta_C * (b~ - gamma))

where ``m`` is the expected number of participants (the fixed denominator also used for the
update). The count is a second Gaussian query on the same clients; Theorem 1 says that
releasing the update sum with noise multiplier ``z_Delta`` and the count with ``sigma_b``
costs as much privacy as one Gaussian mechanism with

    z = (z_Delta^-2 + (2 sigma_b)^-2)^(-1/2)

(the count's sensitivity is 1/2 after centring ``b_i - 1/2``). So for a total noise
multiplier ``z`` (the one the accountant uses) the update gets
``z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2)``: :func:`update_noise_multiplier`. The paper
recommends ``sigma_b = m / 20``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def update_noise_multiplier(total_noise_multiplier: float, count_stddev: float) -> float:
    """``z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2)`` (Theorem 1 solved for the update's share).

    Raises:
        ValueError: If ``z >= 2 sigma_b``: the count alone would spend the whole budget.
    """
    z, s = float(total_noise_multiplier), float(count_stddev)
    if z == 0.0:
        return 0.0
    if not 2.0 * s > z:
        raise ValueError(
            f"adaptive clipping: count_stddev={s} is too small for noise_multiplier={z}"
            f" (needs 2 * count_stddev > noise_multiplier); raise count_stddev"
        )
    return (z**-2 - (2.0 * s) ** -2) ** -0.5


@dataclass
class AdaptiveClipping:
    """Settings of the quantile-tracking clip norm.

    Attributes:
        target_quantile: ``gamma``, the fraction of updates that should stay unclipped.
        learning_rate: ``eta_C``, the step of the geometric update (0.2 in the paper).
        count_stddev: ``sigma_b``, the noise on the unclipped count; ``None`` takes the
            paper's ``m / 20`` with ``m`` the expected number of participants.
    """

    target_quantile: float = 0.5
    learning_rate: float = 0.2
    count_stddev: float | None = None

    def __post_init__(self) -> None:
        problems = []
        if not 0.0 <= self.target_quantile <= 1.0:
            problems.append(f"target_quantile must be in [0, 1], got {self.target_quantile!r}")
        if not self.learning_rate > 0:
            problems.append(f"learning_rate must be > 0, got {self.learning_rate!r}")
        if self.count_stddev is not None and not self.count_stddev >= 0:
            problems.append(f"count_stddev must be >= 0, got {self.count_stddev!r}")
        if problems:
            raise ValueError("adaptive clipping: " + "; ".join(problems))

    def stddev(self, expected_clients: float) -> float:
        """``sigma_b``: the configured one, or ``m / 20``."""
        return float(expected_clients) / 20.0 if self.count_stddev is None else float(self.count_stddev)

    def next_clip_norm(
        self,
        clip_norm: float,
        unclipped: int,
        expected_clients: float,
        generator: torch.Generator | None = None,
    ) -> tuple[float, float]:
        """One step of the geometric update.

        Args:
            clip_norm: The current ``C``.
            unclipped: ``sum_i b_i``, how many participants had ``||Delta_i|| <= C``.
            expected_clients: ``m``.
            generator: Source of the count's noise.

        Returns:
            The next ``C`` and the noised unclipped fraction ``b~``.
        """
        noise = float(torch.randn((), generator=generator, dtype=torch.float64)) * self.stddev(expected_clients)
        fraction = (unclipped + noise) / float(expected_clients)  # b~
        return clip_norm * math.exp(-self.learning_rate * (fraction - self.target_quantile)), fraction
