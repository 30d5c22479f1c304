"""Adaptive clipping to a target quantile (Andrew, Thakkar, McMahan, Ramaswamy, 2021,
"Differentially Private Learning with Adaptive Clipping", NeurIPS, arXiv:1905.03871).

Each round the server learns whether each participant's update norm was at most the current
clip ``C`` (``b_i = 1[||Delta_i|| <= C]``), privatizes the count with its own Gaussian noise
and moves ``C`` geometrically towards the norm that a fraction ``gamma`` of updates stays
under (Algorithm 1, lines "b~" and "C <-"), with the count *centred* as in the reference
implementation (TensorFlow Privacy's ``QuantileEstimatorQuery`` sums ``b_i - 1/2`` and adds
the ``1/2`` back after normalising):

    b~ = (sum_{i in S} (b_i - 1/2) + N(0, sigma_b^2)) / m + 1/2
    C <- C * exp(-eta_C * (b~ - gamma))

where ``m`` is the expected number of participants (the fixed denominator also used for the
update). Adding or removing one client moves the centred sum by exactly ``1/2``
(:data:`COUNT_SENSITIVITY`), whatever its ``b_i``; the uncentred ``sum_i b_i`` would move by 1
and so carry only half the noise multiplier the split below assumes. The count is a second
Gaussian query on the same clients, with noise multiplier ``sigma_b / (1/2) = 2 sigma_b``;
Theorem 1 says that releasing the update sum with noise multiplier ``z_Delta`` and the count
costs as much privacy as one Gaussian mechanism with

    z = (z_Delta^-2 + (2 sigma_b)^-2)^(-1/2)             # :func:`total_noise_multiplier`

So for a total noise multiplier ``z`` (the one the accountant uses) the update gets
``z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2)``: :func:`update_noise_multiplier`. No split exists
when ``z >= 2 sigma_b`` (the count alone would spend the budget); a run checks this before
training. The paper recommends ``sigma_b = m / 20``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from lightning_fed.errors import ConfigRefusal
from lightning_fed.federation.secret_seed import standard_normal
from lightning_fed.wrapper_rules import adaptive_problems, count_split_line

#: How far one client moves the centred count ``sum_i (b_i - 1/2)`` (added or removed).
COUNT_SENSITIVITY = 0.5


def total_noise_multiplier(update_noise_multiplier: float, count_stddev: float) -> float:
    """``z = (z_Delta^-2 + (sigma_b / (1/2))^-2)^(-1/2)``: the one Gaussian mechanism that the update
    sum (``z_Delta``) and the centred count (``sigma_b``, sensitivity :data:`COUNT_SENSITIVITY`)
    together cost (Theorem 1)."""
    z_update, count_z = float(update_noise_multiplier), float(count_stddev) / COUNT_SENSITIVITY
    if z_update == 0.0 or count_z == 0.0:
        return 0.0
    return (z_update**-2 + count_z**-2) ** -0.5


def update_noise_multiplier(total_noise_multiplier: float, count_stddev: float) -> float:
    """``z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2)`` (Theorem 1 solved for the update's share).

    Raises:
        ConfigRefusal: If ``z >= 2 sigma_b``: the count alone would spend the whole budget (one
            line naming ``federation.strategy.adaptive.count_stddev`` and the smallest value that would
            do: :func:`~lightning_fed.wrapper_rules.count_split_line`, the early check's too).
    """
    z, s = float(total_noise_multiplier), float(count_stddev)
    if z == 0.0:
        return 0.0
    count_z = s / COUNT_SENSITIVITY
    if not count_z > z:
        raise ConfigRefusal(count_split_line(s, z))
    return (z**-2 - count_z**-2) ** -0.5


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
        # lightning_fed/wrapper_rules.py: the precheck refuses the same values with the same line
        if problems := adaptive_problems(self.target_quantile, self.learning_rate, self.count_stddev):
            raise ValueError("; ".join(problems))

    def stddev(self, expected_clients: float) -> float:
        """``sigma_b``: the configured one, or ``m / 20``."""
        return float(expected_clients) / 20.0 if self.count_stddev is None else float(self.count_stddev)

    def next_clip_norm(
        self,
        clip_norm: float,
        unclipped: int,
        expected_clients: float,
        generator: np.random.Generator | torch.Generator | None = None,
        *,
        participants: int,
    ) -> tuple[float, float]:
        """One step of the geometric update, on the centred count (module docstring).

        Args:
            clip_norm: The current ``C``.
            unclipped: ``sum_i b_i``, how many participants had ``||Delta_i|| <= C``.
            expected_clients: ``m``.
            generator: Source of the count's noise (a run's: a secret draw's numpy generator).
            participants: ``|S|``, the participants whose ``b_i`` were counted.

        Returns:
            The next ``C`` and the noised unclipped fraction ``b~``.
        """
        fraction = float(self.noised_fraction(unclipped, expected_clients, generator, participants=participants))
        return clip_norm * math.exp(-self.learning_rate * (fraction - self.target_quantile)), fraction

    def noised_fraction(
        self,
        unclipped: int | torch.Tensor,
        expected_clients: float,
        generator: np.random.Generator | torch.Generator | None = None,
        *,
        participants: int | torch.Tensor,
    ) -> torch.Tensor:
        """The count's release, ``b~ = (sum_i (b_i - 1/2) + N(0, sigma_b^2)) / m + 1/2`` (module docstring).

        ``unclipped`` and ``participants`` may be tensors of one shape (independent releases, one
        noise draw each, e.g. the trials of ``benchmarks/count_audit.py``); a round releases one.

        Args:
            unclipped: ``sum_i b_i``, how many participants had ``||Delta_i|| <= C``.
            expected_clients: ``m``.
            generator: Source of the count's noise (a run's: a secret draw's numpy generator).
            participants: ``|S|``, the participants whose ``b_i`` were counted.

        Returns:
            ``b~`` (float64), shaped as ``unclipped``.
        """
        count = torch.as_tensor(unclipped, dtype=torch.float64)
        size = torch.as_tensor(participants, dtype=torch.float64)
        if bool(((count < 0) | (count > size)).any()):
            raise ValueError(f"adaptive clipping: unclipped={unclipped} must be in [0, participants={participants}]")
        noise = standard_normal(count.shape, generator, torch.float64) * self.stddev(expected_clients)
        centred = count - COUNT_SENSITIVITY * size  # sum_i (b_i - 1/2)
        return (centred + noise) / float(expected_clients) + COUNT_SENSITIVITY  # b~
