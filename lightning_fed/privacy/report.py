"""The run's privacy report: every channel a client's data reaches the server through, its
protection and its ``(epsilon, delta)``, and the epsilon that holds against each party
(:data:`PARTIES`: whoever gets the model, whoever reads the run folder, the server, another
client; :meth:`PrivacyReport.adversaries`). :meth:`PrivacyReport.section` is the ``privacy``
section of ``summary.json``; :meth:`PrivacyReport.epsilon_at` is ``privacy/epsilon`` per round.

The channels, their protections and the parties are named in
:mod:`~lightning_fed.privacy.channels`.

The defaults when DP is on (the choice, see ``docs/privacy.md``): the client does *not send*
its training loss, and the per-client figures the server has (update norms, a time budget's
step counts) are *withheld* from the reports (:func:`redact_client_metrics`), since a raw loss
is an unbounded function of the client's data and noising it well would cost budget for no
training benefit; so is everything computed on the clients' validation data, the means over
clients included (with one client evaluated the mean *is* its loss), unless
``federation.privacy.report_validation`` opts into the means (then listed as unprotected);
example counts are *bucketed* to a power of two (:func:`bucket_count`), which hides the
exact size while keeping its order of magnitude, and ``ClientLevelDP`` weighs every client
equally, so the exact count is never needed. The report states what the run did (the
``counts_bucketed`` / ``metrics_withheld`` flags are set by whoever applies them), never what
it should have done.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lightning_fed.federation.report import bucket_count
from lightning_fed.privacy.accountant import PrivacyAccountant, composed_epsilon
from lightning_fed.privacy.channels import (
    PARTIES,
    PROTECTIONS,
    VALIDATION_CHOICES,
    VALIDATION_NOTES,
    ChannelReport,
)

__all__ = ["PARTIES", "PROTECTIONS", "ChannelReport", "PrivacyReport", "bucket_count", "redact_client_metrics"]


def redact_client_metrics(metrics: Mapping[str, Any], private: bool) -> dict[str, Any]:
    """Per-client metrics as they may be reported: all of them without DP, none with DP."""
    return {} if private else dict(metrics)


class PrivacyReport:
    """What the run protects, per channel, and the epsilon spent so far.

    Args:
        client_dp: The client-level accountant (rounds recorded with its ``step``), if on.
        example_dp: The example-level accountant of the most exposed client, if DP-SGD is on.
        local_steps_per_round: Local steps per round, to count ``example_dp`` steps per round.
        personal_parameters: Whether the method keeps personal parameters on the clients.
        centroids: ``CentroidAccountant.report()`` of a FedHDS run with noised centroids, or
            ``{}`` when FedHDS runs without noise, or ``None`` when it is not used.
        selector_losses: Whether clients report FedBiscuit's selector losses.
        selector_dp: Their Gaussian mechanism's accountant (``z_s``, rate 1), when noised.
        selector_groupings: Groupings whose losses were noised (the steps of ``selector_dp``).
        selector_clip: ``L``: each selector loss was clipped to ``[0, L]`` before the noise.
        counts_bucketed: Whether the clients' example counts were bucketed before sending.
        metrics_withheld: Whether per-client metrics were kept out of the reports.
        losses_sent: Whether the clients sent their training loss (``False`` with DP on).
        secure_sum: Whether the server only held the sum of the updates (SecAgg+; then each
            client adds its share of the client-level noise: distributed DP).
        hook_channels: What the run's hooks send beyond the channels above, each as its hook
            names it (``RoundHook.privacy_channels(...)["channels"]``).
        client_states: Whether the run folder holds the clients' own state (``client_states/``
            and the checkpoint's index of it, in process: SCAFFOLD's control variates, personal
            parameters), unnoised and present only for the clients that have trained.
    """

    def __init__(
        self,
        client_dp: PrivacyAccountant | None = None,
        example_dp: PrivacyAccountant | None = None,
        local_steps_per_round: int = 1,
        personal_parameters: bool = False,
        centroids: Mapping[str, Any] | None = None,
        selector_losses: bool = False,
        counts_bucketed: bool = False,
        metrics_withheld: bool = False,
        secure_sum: bool = False,
        example_steps: int | None = None,
        example_level_on: bool = False,
        validation: str = "none",
        selector_dp: PrivacyAccountant | None = None,
        selector_groupings: int = 0,
        selector_clip: float | None = None,
        losses_sent: bool = True,
        hook_channels: Sequence[ChannelReport] = (),
        client_states: bool = False,
    ) -> None:
        self.client_dp, self.example_dp = client_dp, example_dp
        self.local_steps_per_round = int(local_steps_per_round)
        self.example_steps = example_steps
        self.example_level_on = example_level_on or example_dp is not None
        self.personal_parameters, self.centroids, self.selector_losses = personal_parameters, centroids, selector_losses
        self.counts_bucketed, self.metrics_withheld = counts_bucketed, metrics_withheld
        if validation not in VALIDATION_CHOICES:
            raise ValueError(f"validation must be one of {VALIDATION_CHOICES}, got {validation!r}")
        self.validation = validation
        self.secure_sum = secure_sum
        self.selector_dp, self.selector_groupings = selector_dp, int(selector_groupings)
        self.selector_clip = selector_clip
        self.losses_sent = losses_sent
        self.hook_channels = list(hook_channels)
        self.client_states = client_states
        self.stop: dict[str, Any] | None = None

    def _example_epsilon(self, rounds: int) -> float:
        steps = self.example_steps if self.example_steps is not None else rounds * self.local_steps_per_round
        return self.example_dp.epsilon(steps)

    @property
    def enabled(self) -> bool:
        return self.client_dp is not None or self.example_level_on

    @property
    def trust_model(self) -> str:
        """Whom the update channel's guarantee holds against."""
        if self.secure_sum:
            return (
                "secure aggregation (Flower SecAgg+): the server sees only the masked sum;"
                " client-level noise added by the clients in shares (distributed DP)"
            )
        return "trusted server (central DP); no secure aggregation"

    def epsilon_at(self, rounds: int) -> dict[str, float]:
        """``privacy/epsilon`` after ``rounds`` rounds: ``{"client": ..., "example": ...}`` for the enabled levels."""
        out = {}
        if self.client_dp is not None:
            out["client"] = self.client_dp.epsilon(rounds)
        if self.example_dp is not None:
            out["example"] = self._example_epsilon(rounds)
        if self.selector_dp is not None:
            out["client_all_channels"] = self.client_all_channels(rounds)
        return out

    def client_all_channels(self, rounds: int) -> float:
        """Client-level epsilon of the update channel (``rounds`` rounds) and FedBiscuit's noised
        selector losses (the groupings so far) composed by Opacus; ``inf`` when the update has no
        client-level guarantee (DP-SGD alone protects examples, not a client's whole data)."""
        if self.client_dp is None:
            return math.inf
        parts = [(self.client_dp, rounds)]
        if self.selector_dp is not None:
            parts.append((self.selector_dp, self.selector_groupings))
        return composed_epsilon(parts, self.client_dp.delta, self.client_dp.mechanism)

    def stopped(self, next_round: int, option: str = "federation.privacy.target_epsilon") -> None:
        """Record that the run stopped before ``next_round`` because it would exceed the budget ``option``."""
        who = " for one of its clients" if option.startswith("model.dp_sgd") else ""
        self.stop = {"before_round": int(next_round), "reason": f"the next round would exceed {option}{who}"}

    def _update_guarantees(self, rounds: int) -> list[dict[str, Any]]:
        out = []
        if self.client_dp is not None:
            out.append({"unit": "client", "epsilon": self.client_dp.epsilon(rounds), "delta": self.client_dp.delta})
        if self.example_dp is not None:
            eps = self._example_epsilon(rounds)
            out.append({"unit": "example", "epsilon": eps, "delta": self.example_dp.delta})
        return out

    def channels(self, rounds: int) -> list[ChannelReport]:
        """Every channel of the run after ``rounds`` rounds."""
        update = self._update_guarantees(rounds)
        levels = (("client_dp", self.client_dp), ("example_dp", self.example_level_on), ("secure_sum", self.secure_sum))
        protection = "+".join(p for p, on in levels if on)
        out = [
            ChannelReport(
                "update",
                protection or "none",
                update,
                "" if self.client_dp else "without client-level DP the server sees each client's exact update",
            ),
            self._metrics_channel(),
            ChannelReport("validation", self.validation, note=VALIDATION_NOTES[self.validation]),
            ChannelReport(
                "example_counts",
                "bucketed" if self.counts_bucketed else "none",
                note="ClientLevelDP weighs clients equally; the count is not used by the aggregate",
            ),
        ]
        if self.centroids is not None:
            if self.centroids:  # CentroidAccountant.report(): the most exposed client's epsilon; the
                # sensitivity is the whole tanh range, so any change of the client's data is covered
                eps = [{"unit": "client", "epsilon": self.centroids["max_epsilon"], "delta": self.centroids["delta"]}]
                out.append(ChannelReport("fedhds_centroids", "gaussian", eps))
            else:
                out.append(ChannelReport("fedhds_centroids", "none"))
        if self.selector_losses:
            out.append(self._selector_channel())
        out.extend(self.hook_channels)
        if self.personal_parameters:
            out.append(
                ChannelReport(
                    "personal_parameters",
                    "local",
                    note="trained on the client's data and kept there: whoever gets them gets no DP guarantee",
                )
            )
        return out

    def _metrics_channel(self) -> ChannelReport:
        protection = "withheld" if self.metrics_withheld else "none"
        if not self.losses_sent:
            return ChannelReport(
                "metrics",
                f"not_sent+{protection}",
                note="the client sends no training loss; the per-client figures the server has (update norm,"
                " a time budget's local_steps / cut_short) are not covered by any epsilon",
            )
        return ChannelReport(
            "metrics", protection, note="per-client losses and accuracies are not covered by any epsilon"
        )

    def _selector_channel(self) -> ChannelReport:
        if self.selector_dp is None:
            return ChannelReport(
                "selector_losses",
                "none",
                note="FedBiscuit's grouping input; the cluster assignment it yields is outside the guarantee",
            )
        acc, g = self.selector_dp, self.selector_groupings
        eps = {"unit": "client", "epsilon": acc.epsilon(g), "delta": acc.delta}
        return ChannelReport(
            "selector_losses",
            "gaussian",
            [eps],
            note=f"each loss clipped to [0, L], L={self.selector_clip}, plus N(0, (z_s L sqrt(U))^2) per coordinate"
            f" on the client, z_s={acc.noise_multiplier:g};"
            f" {g} groupings at rate 1 (every client answers); federation.privacy.target_epsilon bounds the update"
            " channel only: epsilon.client_all_channels composes both",
        )

    # ------------------------------------------------------------------ one epsilon per adversary
    def _client_epsilon(self, rounds: int, amplified: bool) -> float:
        """Client-level epsilon of the update channel (with FedBiscuit's noised selector losses
        composed), at the accounted sample rate or, ``amplified=False``, at rate 1 (Opacus either way)."""
        acc = self.client_dp
        if acc is None:
            return math.inf
        if not amplified and acc.sample_rate < 1.0:  # the adversary knows the sample: no amplification
            acc = PrivacyAccountant(acc.noise_multiplier, 1.0, acc.delta, mechanism=acc.mechanism)
        parts = [(acc, rounds)]
        if self.selector_dp is not None:
            parts.append((self.selector_dp, self.selector_groupings))
        return composed_epsilon(parts, acc.delta, acc.mechanism)

    def _client_reason(self, party: str) -> str:
        if self.client_dp is None:
            return "no client-level DP: a client's whole data set is not protected"
        selector = ", FedBiscuit's noised selector losses composed" if self.selector_dp is not None else ""
        if party == "server":
            if not self.secure_sum:
                return "trusted server (central DP): it receives each client's clipped update before the noise"
            return f"sees only the noised secure sum, but picks the sample: accounted at rate 1{selector}"
        sees = {
            "final_model": "sees only the noised global state, not the sample",
            "run_folder": "holds the noised global states and reports, not the sample or the noise's secret",
            "other_client": "receives only noised global states, not who else was sampled",
        }[party]
        q = self.client_dp.sample_rate
        sampling = f"Poisson sampling at rate {q:g} amplifies" if q < 1.0 else "accounted at rate 1 (fixed-size sample)"
        return f"{sees}: {sampling}{selector}"

    def _ledger_shows_sample(self) -> bool:
        """Whether the run folder shows the client sample: DP-SGD's per-client ledger is in the checkpoint
        and client-level DP claims amplification by Poisson sampling."""
        return self.example_level_on and self.client_dp is not None and self.client_dp.sample_rate < 1.0

    def _not_covered(self, party: str) -> list[str]:
        """Channels ``party`` sees that no epsilon covers."""
        out = [] if self.client_dp is not None or self.example_level_on else ["update"]
        if party in ("final_model", "other_client"):
            return out
        server = party == "server"
        if server or not self.metrics_withheld:
            out.append("metrics")
        if server or self.validation != "withheld":
            out.append("validation")
        out.append("example_counts")
        if self.selector_losses and self.selector_dp is None:
            out.append("selector_losses")
        if self.centroids is not None and not self.centroids:
            out.append("fedhds_centroids")
        out.extend(c.channel for c in self.hook_channels if not c.guarantees)
        if not server and self.client_dp is not None and self.client_dp.sample_rate < 1.0:
            out.append("sample_size")  # a Poisson round's number of clients: its byte counts show it
        if party == "run_folder" and self.example_level_on:
            out.append("per_client_rounds")  # DP-SGD's ledger in the checkpoint (see adversaries)
        if party == "run_folder" and self.client_states:
            out.append("client_states")  # each trained client's own state (see adversaries)
        return out

    def adversaries(self, rounds: int) -> dict[str, dict[str, Any]]:
        """For each party of :data:`PARTIES`: the epsilon that holds against it after ``rounds`` rounds
        (client level; example level with DP-SGD), why, and the channels it sees that no epsilon covers.

        Amplification by client sampling is claimed only against parties that cannot see the sample
        (the run draws it from secret randomness and writes no client list); the server picks it,
        so against the server the client-level figure is at rate 1, and under central DP the server
        sees every clipped update (no guarantee). DP-SGD's noise is added on the client over Poisson
        batches drawn from the client's secret randomness, so its epsilon (amplified by ``B / |D_k|``)
        holds against every party but the client itself."""
        delta = next((a.delta for a in (self.client_dp, self.example_dp) if a is not None), None)
        amplified = self._client_epsilon(rounds, amplified=True)
        server = self._client_epsilon(rounds, amplified=False) if self.secure_sum else math.inf
        out: dict[str, dict[str, Any]] = {}
        for party in PARTIES:
            epsilon: dict[str, float] = {"client": server if party == "server" else amplified}
            reasons = [self._client_reason(party)]
            if party == "run_folder" and self._ledger_shows_sample():
                # DP-SGD's per-client ledger (how many rounds each client trained: its example-level
                # accounting, resumed from the checkpoint) shows who was sampled to whoever has the run
                # folder, so no amplification by sampling holds against it (found from outside, issue 40)
                epsilon["client"] = self._client_epsilon(rounds, amplified=False)
                reasons[0] = (
                    "the checkpoint keeps DP-SGD's per-client ledger (rounds each client trained), which shows"
                    " the sample: accounted at rate 1"
                )
            if party == "run_folder" and self.client_states and self.client_dp is not None:
                # client_states/ holds a file per client that has trained (who was sampled) with that
                # client's own state, unnoised (SCAFFOLD's c_i+ is its mean local gradient): no
                # client-level guarantee holds against whoever has the run folder (issue 40)
                epsilon["client"] = math.inf
                reasons[0] = (
                    "client_states/ and the checkpoint hold each trained client's own state (SCAFFOLD's"
                    " control variate, personal parameters), unnoised: they show the sample and a function"
                    " of the client's data, so no client-level guarantee"
                )
            if self.example_level_on:
                epsilon["example"] = self._example_epsilon(rounds) if self.example_dp is not None else 0.0
                reasons.append(
                    "DP-SGD noise added on the client over Poisson batches drawn from its secret randomness"
                    " (rate B / |D_k|, the most exposed client)"
                )
            out[party] = {
                "sees": PARTIES[party],
                "epsilon": epsilon,
                "delta": delta,
                "why": "; ".join(reasons),
                "not_covered": self._not_covered(party),
            }
        return out

    def section(self, rounds: int) -> dict[str, Any]:
        """The ``privacy`` section of ``summary.json`` after ``rounds`` rounds."""
        section: dict[str, Any] = {
            "enabled": self.enabled,
            "trust_model": self.trust_model,
            "epsilon": self.epsilon_at(rounds),
            "adversaries": self.adversaries(rounds),
            "channels": {c.channel: c.as_dict() for c in self.channels(rounds)},
        }
        for level, acc in (("client_level", self.client_dp), ("example_level", self.example_dp)):
            if acc is not None:
                section[level] = {
                    "noise_multiplier": acc.noise_multiplier,
                    "sample_rate": acc.sample_rate,
                    "delta": acc.delta,
                    "target_epsilon": acc.target_epsilon,
                    "accountant": acc.mechanism,
                }
        if self.selector_dp is not None:
            section["selector_losses"] = {
                "noise_multiplier": self.selector_dp.noise_multiplier,
                "clip": self.selector_clip,
                "sample_rate": self.selector_dp.sample_rate,
                "groupings": self.selector_groupings,
                "delta": self.selector_dp.delta,
                "accountant": self.selector_dp.mechanism,
            }
        if self.example_dp is not None and self.example_steps is not None:
            section["example_level"]["accounting"] = (
                "per client, over the rounds it trained in; the largest client epsilon (noise_multiplier and"
                " sample_rate are that client's)"
            )
        if self.stop is not None:
            section["stopped"] = self.stop
        return _finite(section)


def _finite(value: Any) -> Any:
    """JSON has no infinity: write it as the string ``"inf"``."""
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
