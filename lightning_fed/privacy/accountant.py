"""Privacy accounting for rounds of a sampled Gaussian mechanism, by Opacus.

Nothing here computes a privacy loss: Opacus' accountants do (``RDPAccountant``: Mironov,
Talwar, Zhang 2019 for the Poisson-subsampled Gaussian with the Balle et al. 2020 conversion;
``PRVAccountant``: Gopi, Lee, Wutschitz 2021), and ``opacus.accountants.utils
.get_noise_multiplier`` calibrates ``z`` by bisection on them. This module only says which
mechanism a federation runs and keeps the round count.

A round of client-level DP (:class:`~lightning_fed.privacy.ClientLevelDP`) is one sampled
Gaussian mechanism on the users' clipped updates with noise multiplier ``z``; ``T`` rounds
compose. The sampling rate the accountant may use depends on the sampler
(:mod:`lightning_fed.federation.sampling`):

* ``poisson`` at rate ``q``: the Poisson-subsampled Gaussian that the accountants analyse,
  so ``sample_rate = q`` (privacy amplification by sampling);
* ``fixed_size``: sampling ``m`` of ``N`` without replacement is *not* the mechanism Opacus
  analyses (its amplification bound is a different theorem, under replace-one neighbours), so
  it is accounted with ``sample_rate = 1``: every round counted as if the client took part.
  That bound is sound but loose; use Poisson sampling for the amplified one.

Example-level DP-SGD inside a client (:mod:`lightning_fed.privacy.dp_sgd`) uses the same class
with ``sample_rate = B / |D_k|`` per local step and one step per local optimizer step; the
amplification there likewise assumes Poisson batches (Opacus' ``DPDataLoader``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from opacus.accountants import create_accountant

from lightning_fed.errors import ValueRefusal
from lightning_fed.federation.sampling import expected_clients
from lightning_fed.noise_calibration import CLIENT_LEVEL_HINT, refused_budget_line
from lightning_fed.noise_calibration import opacus_noise_multiplier as _opacus_noise_multiplier

MECHANISMS = ("rdp", "prv")


def accounted_sample_rate(sampling: str, num_clients: int, clients_per_round: int = 0, rate: float = 0.0) -> float:
    """The sampling rate the accountant may use for ``sampling`` (see the module docstring)."""
    expected_clients(num_clients, sampling, clients_per_round, rate)  # validates
    return float(rate) if sampling == "poisson" else 1.0


#: Why distributed DP under secure aggregation refuses Poisson sampling (the run's plan, before training).
POISSON_UNDER_SECURE_SUM = (
    "federation.sampling=poisson cannot run with SecureAggregation around ClientLevelDP: the server picks the sample,"
    " so sampling amplifies nothing against it, and each client's noise share is sized for the expected m clients,"
    " so a smaller sample would carry less noise than accounted; use federation.sampling=fixed_size"
    " (federation.clients_per_round)"
)


def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    mechanism: str = "rdp",
    unit: str = "rounds",
    option: str = "federation.privacy.target_epsilon",
    hint: str = CLIENT_LEVEL_HINT,
    over: str | None = None,
) -> float:
    """The smallest ``z`` (within Opacus' 0.01 tolerance on epsilon) that keeps ``steps`` steps within budget.

    Args:
        target_epsilon: The budget. delta: its ``delta``. sample_rate: ``q`` of each step.
        steps: Steps of the mechanism: rounds (client level) or local steps (DP-SGD).
        mechanism: ``rdp`` or ``prv``.
        unit: What a step is, for the message (``rounds``, ``local steps``).
        option: The option that set ``target_epsilon``, for the message.
        hint: What to change, for the message.
        over: What the budget is accounted over, naming its options, for the message (instead of
            ``over <steps> <unit> at sample rate <sample_rate>``).

    Raises:
        ValueError: One line naming the options to change when no ``z`` reaches the budget, or when it
            needs one below :data:`~lightning_fed.noise_calibration.MIN_NOISE_MULTIPLIER`.
    """
    _check(target_epsilon=target_epsilon, delta=delta, sample_rate=sample_rate, steps=steps, mechanism=mechanism)
    try:
        return _opacus_noise_multiplier(float(target_epsilon), float(delta), float(sample_rate), int(steps), mechanism)
    except ValueError as err:  # z below MIN_NOISE_MULTIPLIER or above the cap, or Opacus' "too low"
        line = refused_budget_line(err, target_epsilon, delta, steps, sample_rate, unit, option, hint, over)
        raise ValueRefusal(line, option) from None  # one line: DP-SGD's budget is known once the data is read


def _check(**values: Any) -> None:
    problems = []
    eps = values.get("target_epsilon")
    if eps is not None and not (eps > 0 and not math.isnan(eps)):
        problems.append(f"federation.privacy.target_epsilon must be > 0, got {eps!r}")
    if "delta" in values and not 0.0 < values["delta"] < 1.0:
        problems.append(f"federation.privacy.delta must be in (0, 1), got {values['delta']!r}")
    if "sample_rate" in values and not 0.0 < values["sample_rate"] <= 1.0:
        problems.append(f"sample rate must be in (0, 1], got {values['sample_rate']!r}")
    if "steps" in values and not values["steps"] >= 1:
        problems.append(f"the number of steps must be >= 1, got {values['steps']!r}")
    if "noise_multiplier" in values and not values["noise_multiplier"] > 0:
        problems.append(f"federation.privacy.noise_multiplier must be > 0, got {values['noise_multiplier']!r}")
    if "mechanism" in values and values["mechanism"] not in MECHANISMS:
        problems.append(f"federation.privacy.accountant must be one of {MECHANISMS}, got {values['mechanism']!r}")
    if problems:
        raise ValueError("; ".join(problems))


class PrivacyAccountant:
    """``(epsilon, delta)`` after a number of rounds (or local steps) of one sampled Gaussian mechanism.

    Args:
        noise_multiplier: ``z`` (the total one: with adaptive clipping, the ``z`` of Theorem 1).
        sample_rate: ``q`` the accountant may use (:func:`accounted_sample_rate`).
        delta: ``delta`` of the guarantee.
        target_epsilon: The budget; ``None`` for no budget (:meth:`would_exceed` is then ``False``).
        mechanism: ``rdp`` or ``prv`` (Opacus' accountants).

    Example:
        >>> acc = PrivacyAccountant(noise_multiplier=1.0, sample_rate=0.01, delta=1e-5, target_epsilon=2.0)
        >>> acc.epsilon(0)
        0.0
        >>> acc.would_exceed(0)
        False
    """

    def __init__(
        self,
        noise_multiplier: float,
        sample_rate: float,
        delta: float,
        target_epsilon: float | None = None,
        mechanism: str = "rdp",
    ) -> None:
        _check(
            noise_multiplier=noise_multiplier,
            sample_rate=sample_rate,
            delta=delta,
            target_epsilon=target_epsilon,
            mechanism=mechanism,
        )
        self.noise_multiplier = float(noise_multiplier)
        self.sample_rate = float(sample_rate)
        self.delta = float(delta)
        self.target_epsilon = None if target_epsilon is None else float(target_epsilon)
        self.mechanism = mechanism
        self.steps_done = 0

    @classmethod
    def calibrated(
        cls, target_epsilon: float, delta: float, sample_rate: float, steps: int, mechanism: str = "rdp"
    ) -> PrivacyAccountant:
        """An accountant whose ``z`` is calibrated so that ``steps`` steps spend at most ``target_epsilon``."""
        z = calibrate_noise_multiplier(target_epsilon, delta, sample_rate, steps, mechanism)
        return cls(z, sample_rate, delta, target_epsilon, mechanism)

    def epsilon(self, steps: int | None = None) -> float:
        """Epsilon after ``steps`` steps (default: those recorded with :meth:`step`)."""
        steps = self.steps_done if steps is None else int(steps)
        if steps <= 0:
            return 0.0
        accountant = create_accountant(mechanism=self.mechanism)
        accountant.history = [(self.noise_multiplier, self.sample_rate, steps)]  # Opacus' composition record
        return float(accountant.get_epsilon(delta=self.delta))

    def step(self, steps: int = 1) -> float:
        """Record ``steps`` more steps (rounds); return the epsilon spent so far."""
        self.steps_done += int(steps)
        return self.epsilon()

    def would_exceed(self, next_step: int) -> bool:
        """Whether running step (round) ``next_step`` (0-based) would spend more than ``target_epsilon``.

        Running it makes ``next_step + 1`` steps in all; call before the round starts and stop
        the run if ``True``.
        """
        if self.target_epsilon is None:
            return False
        return self.epsilon(next_step + 1) > self.target_epsilon

    def state_dict(self) -> dict[str, Any]:
        """The steps recorded so far (the settings come from the config)."""
        return {"steps_done": self.steps_done}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.steps_done = int(state.get("steps_done", self.steps_done))


def composed_epsilon(parts: list[tuple[PrivacyAccountant, int]], delta: float, mechanism: str = "rdp") -> float:
    """Epsilon of several Gaussian mechanisms on the same unit composed, at ``delta``.

    ``parts`` holds ``(accountant, steps)`` per mechanism (e.g. the client-level update channel
    over its rounds and FedBiscuit's selector losses over its groupings); Opacus composes its
    ``history`` of ``(noise_multiplier, sample_rate, steps)`` entries, heterogeneous ones
    included. Parts with no step are left out (``0.0`` when none is left).
    """
    history = [(acc.noise_multiplier, acc.sample_rate, int(steps)) for acc, steps in parts if steps > 0]
    if not history:
        return 0.0
    accountant = create_accountant(mechanism=mechanism)
    accountant.history = history
    return float(accountant.get_epsilon(delta=float(delta)))
