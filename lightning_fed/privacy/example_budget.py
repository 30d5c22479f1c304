"""DP-SGD's budget, client by client: each client's noise calibrated for its own sampling rate,
and each client's epsilon accounted over the rounds it trained in (Flower issue #605 asks for
per-client accounting; clients are sampled unequally often and hold unequal amounts of data).

A client ``k`` that holds ``|D_k|`` examples and trains ``K_k`` local steps of batch ``B`` per round
runs, per round it takes part in, ``K_k`` steps of the sampled Gaussian mechanism at rate
``q_k = B / |D_k|`` (Abadi et al. 2016; Opacus accounts it). Its epsilon after ``c_k`` rounds is
``eps(z_k, q_k, c_k K_k)``; the run's example-level epsilon is the largest over the clients: the
*binding* client is the one with the largest, which is neither always the smallest client (with
``local_epochs`` a larger client takes more steps) nor the one sampled most often, but the
combination.

Everything here is a function of the client's *bucketed* count ``b_k`` (the largest power of
two ``<= |D_k|``, what a private client reports): ``q_k <= B / b_k``, and with ``local_epochs``
``K_k <= E ceil((2 b_k - 1) / B)``. So the client (which knows ``|D_k|``) and a server that
knows only ``b_k`` (Flower) compute the same ``z_k`` and the same epsilon, a sound bound on the
client's own.

With ``model.dp_sgd.target_epsilon``, ``z_k`` is calibrated (``opacus.accountants.utils
.get_noise_multiplier``) so that a client taking part in *every* planned round stays within the
budget: ``eps(z_k, q_k, T K_k) <= target``. A run never exceeds it unless it goes past its
planned rounds (a resume with more ``federation.rounds`` keeps the ``z_k`` of the plan); then
the server stops before the round that would take one of its clients over it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lightning_fed.errors import ValueRefusal
from lightning_fed.federation.report import bucket_count
from lightning_fed.noise_calibration import below_floor_line, rdp_floor
from lightning_fed.privacy.accountant import PrivacyAccountant, calibrate_noise_multiplier
from lightning_fed.run_config import FederationConfig

#: What to change when a client's DP-SGD budget cannot be met.
EXAMPLE_LEVEL_HINT = (
    "raise model.dp_sgd.target_epsilon or federation.privacy.delta, or lower federation.rounds,"
    " federation.local_steps (local_epochs) or data.batch_size"
)


@dataclass
class ExampleBudget:
    """The DP-SGD plan of a run: per-client noise multipliers and per-client epsilon.

    Attributes:
        target_epsilon: ``model.dp_sgd.target_epsilon`` (``None``: ``z`` is given).
        noise_multiplier: ``model.dp_sgd.noise_multiplier`` (``None``: calibrated per client).
        delta: The run's ``delta`` (``federation.privacy.delta``, or its default).
        batch_size: ``B``, examples per local step.
        rounds: Planned rounds ``T`` (what ``z_k`` is calibrated for).
        federation: The run's local work: its ``local_steps`` ``K`` of every client, or (``None``)
            its ``local_epochs`` ``E`` passes per round (read, not copied).
        mechanism: ``rdp`` or ``prv``.
    """

    target_epsilon: float | None
    noise_multiplier: float | None
    delta: float
    batch_size: int
    rounds: int
    federation: FederationConfig = field(default_factory=lambda: FederationConfig(local_steps=None, local_epochs=1))
    mechanism: str = "rdp"
    _calibrated: dict[int, float] = field(default_factory=dict, repr=False)
    _epsilons: dict[tuple[int, int], float] = field(default_factory=dict, repr=False)

    def sample_rate(self, count: int) -> float:
        """``min(1, B / b)`` for a client of ``count`` examples (``b``: its bucketed count)."""
        return min(1.0, self.batch_size / float(bucket_count(count)))

    def steps_per_round(self, count: int) -> int:
        """``K``, or ``E ceil((2 b - 1) / B)``: the most local steps a client of ``count`` examples takes."""
        work = self.federation
        if work.local_steps is not None:
            return int(work.local_steps)
        most = 2 * bucket_count(count) - 1  # b <= |D_k| < 2 b
        return int(work.local_epochs or 1) * math.ceil(most / self.batch_size)

    def noise_multiplier_for(self, count: int) -> float:
        """``z_k`` of a client of ``count`` examples: the given ``z``, or the one calibrated for
        ``T`` rounds of ``K_k`` steps at rate ``q_k`` (cached per bucket).

        Raises:
            ValueError: One line naming ``model.dp_sgd.target_epsilon`` when no ``z`` reaches it.
        """
        if self.noise_multiplier is not None:
            return float(self.noise_multiplier)
        b = bucket_count(count)
        if self.mechanism == "rdp" and self.target_epsilon <= (floor := rdp_floor(self.delta)):
            # the precheck's line (noise_calibration.dp_sgd_budget_problem), without Opacus' bisection to its cap
            raise ValueRefusal(below_floor_line(self.target_epsilon, self.delta, floor), "model.dp_sgd.target_epsilon")
        if b not in self._calibrated:
            self._calibrated[b] = calibrate_noise_multiplier(
                self.target_epsilon,
                self.delta,
                self.sample_rate(b),
                self.rounds * self.steps_per_round(b),
                self.mechanism,
                option="model.dp_sgd.target_epsilon",
                hint=EXAMPLE_LEVEL_HINT,
                over=self._span(b),
            )
        return self._calibrated[b]

    def _span(self, b: int) -> str:
        """What a client of ``b``+ examples is accounted over, each option with its value (``fit`` and ``plan``
        follow each with the file that set it, :func:`lightning_fed.config_precheck.named_source`; red team 15
        M8: ``15 local steps (3 rounds x 5, ...)`` named no option)."""
        work, k = self.federation, self.steps_per_round(b)
        per_round = f"federation.local_steps={k}"
        if work.local_steps is None:
            per_round = f"{k} steps of federation.local_epochs={work.local_epochs or 1}"
        return (
            f"over {self.rounds * k} local steps (federation.rounds={self.rounds} x {per_round}) at sample rate"
            f" {self.sample_rate(b):.4g} (data.batch_size={self.batch_size} of a client of {b}+ examples)"
        )

    def calibrate(self, sizes: list[int]) -> None:
        """Calibrate ``z_k`` for every client's example count in ``sizes`` (one per bucket), before training:
        ``fit`` once its data is set up (:meth:`~lightning_fed.privacy.run.RunPrivacy.plan`), ``plan`` too.

        Raises:
            ValueError: :meth:`noise_multiplier_for`'s line for a budget no ``z`` reaches.
        """
        for b in sorted({bucket_count(s) for s in sizes if s > 0}):
            self.noise_multiplier_for(b)

    def accountant(self, count: int) -> PrivacyAccountant:
        """The accountant of a client of ``count`` examples (one step per local step)."""
        z = self.noise_multiplier_for(count)
        return PrivacyAccountant(z, self.sample_rate(count), self.delta, self.target_epsilon, self.mechanism)

    def epsilon(self, count: int, rounds_trained: int) -> float:
        """The epsilon of a client of ``count`` examples after training in ``rounds_trained`` rounds
        (cached per bucket and rounds: a federation of many clients has few distinct pairs)."""
        key = (bucket_count(count), int(rounds_trained))
        if key not in self._epsilons:
            self._epsilons[key] = self.accountant(count).epsilon(rounds_trained * self.steps_per_round(count))
        return self._epsilons[key]

    def would_exceed(self, count: int, rounds_trained: int) -> bool:
        """Whether one more round of training takes the client over ``target_epsilon``."""
        if self.target_epsilon is None:
            return False
        return self.epsilon(count, rounds_trained + 1) > self.target_epsilon

    def replan(self, rounds: int) -> None:
        """Keep the ``z_k`` of a plan for ``rounds`` rounds (a resumed run's, from its checkpoint)."""
        if int(rounds) != self.rounds:
            self.rounds = int(rounds)
            self._calibrated.clear()
            self._epsilons.clear()
