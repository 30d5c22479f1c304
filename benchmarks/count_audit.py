"""Many-trial audit of adaptive clipping's noised count, with the uncentred count as a negative control
(issue 32, items 3 and 9).

Why the count gets its own audit: the one-run audit of ``benchmarks/mechanism_audit.py`` attributes
a release to a canary by the canary's own coordinate; the count is one scalar per round shared by
every client, so no canary has a coordinate of its own in it, and a one-run audit cannot tell one
canary's effect from another's. The classic hypothesis-test audit can (Jagielski, Ullman, Oprea
2020, arXiv:2006.07709; Nasr, Song, Thakurta, Papernot, Carlini 2021, arXiv:2101.04535): run the
mechanism many times on neighbouring inputs ``D`` and ``D' = D + one canary client``, guess ``D'``
when a score passes a threshold, bound the false-positive and false-negative rates from above
(Clopper-Pearson), and since ``(epsilon, delta)``-DP implies ``TPR <= e^epsilon FPR + delta`` and
``TNR <= e^epsilon FNR + delta``, the empirical epsilon is

    max( ln((1 - delta - FNR+) / FPR+),  ln((1 - delta - FPR+) / FNR+) )

with both upper bounds at one-sided confidence ``1 - beta / 2`` (together ``1 - beta``, 95%).

**The claim tested.** Andrew et al.'s Theorem 1 splits the accounted ``z`` between the update and
the count on the premise that the count, centred, is a Gaussian mechanism of sensitivity 1/2
(:data:`~lightning_fed.privacy.adaptive_clipping.COUNT_SENSITIVITY`) with noise multiplier
``sigma_b / (1/2) = 2 sigma_b``. So the count channel alone, over ``T`` rounds in which the canary
is counted (the sample known, as the server knows it: rate 1), must be within Opacus' epsilon of
``PrivacyAccountant(2 sigma_b, 1, delta).epsilon(T)``, the package's accountant. Audited with
``configs/feddpo_dp.yaml``'s numbers: ``sigma_b = 2``, ``m = 16``, 10 rounds, delta 1e-5
(claimed: 3.62 RDP; 3.35 PRV).

**The mechanism run** is the package's own release,
:meth:`~lightning_fed.privacy.AdaptiveClipping.noised_fraction` (what ``ClientLevelDP`` calls each
round through ``next_clip_norm``), on all the trials at once: ``D`` is a round of ``m`` participants,
``m / 2`` of them unclipped; ``D'`` adds the canary, unclipped (``b = 1``: the worst case of the
uncentred count). The score of a trial is the sum of its ``T`` released fractions (the likelihood
ratio of ``T`` Gaussian releases with one mean shift is monotone in it). The noise comes from a
generator seeded by the audit's seed (reproducible; the attacker never uses it). Half the trials of
each side choose the threshold (the best bound over a grid of quantiles of the ``D`` scores), the
other half measure it, so the choice costs no confidence.

**Negative control** (``uncentred``): the count as main released it before the fix (commit
2e01028), ``b~ = (sum_i b_i + N(0, sigma_b^2)) / m``: one client moves it by 1, so its noise
multiplier is ``sigma_b``, half the one accounted (true epsilon 7.51 for the 10 rounds, analytic
Gaussian mechanism, against the claimed 3.62).

**Largest showable bound.** With ``n`` measuring trials per side and no error on either side, the
bound is ``ln((1 - delta - FNR+) / FPR+)`` with both rates' upper bounds at 0 errors:
:func:`largest_showable` (12.51 with ``2 * 10^6`` trials per side, ``n = 10^6``; 11.82 with the CI's
``10^6``), far above the claimed 3.62. Measured (``benchmarks/RESULTS.md``): the package's count
audits at 2.30-3.01, the uncentred one at 5.08-5.75, over seeds 0-4.

    OMP_NUM_THREADS=1 python benchmarks/count_audit.py --seeds 0 1 2 3 4 --out runs/count_audit.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from scipy.stats import beta as beta_distribution

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lightning_fed.privacy import AdaptiveClipping, PrivacyAccountant  # noqa: E402
from lightning_fed.privacy.adaptive_clipping import COUNT_SENSITIVITY  # noqa: E402

VARIANTS = ("correct", "uncentred")
#: Quantiles of the ``D`` scores the threshold is chosen among (on the choosing half).
THRESHOLD_QUANTILES = (0.9, 0.99, 0.999, 0.9999, 0.99999)


@dataclass(frozen=True)
class CountSetting:
    """The audited count channel and the audit's design.

    Args:
        count_stddev: ``sigma_b``.
        expected_clients: ``m`` (also the number of participants of ``D``).
        rounds: ``T``, rounds in which the canary is counted.
        delta: The run's delta.
        trials: Runs of the mechanism per side (``D`` and ``D'``), half to choose the threshold.
        beta: One minus the confidence of the bound.
    """

    count_stddev: float = 2.0
    expected_clients: int = 16
    rounds: int = 10
    delta: float = 1e-5
    trials: int = 2_000_000
    beta: float = 0.05

    def epsilon(self, mechanism: str = "rdp") -> float:
        """What the accounting claims for the count alone: a Gaussian mechanism with noise multiplier
        ``sigma_b / (1/2)``, ``T`` times at rate 1 (Opacus, through the package's accountant)."""
        count_z = self.count_stddev / COUNT_SENSITIVITY
        return PrivacyAccountant(count_z, 1.0, self.delta, mechanism=mechanism).epsilon(self.rounds)


#: ``configs/feddpo_dp.yaml``: sigma_b = 2 (adaptive.count_stddev), m = q N = 16, 10 rounds, delta 1e-5.
FEDDPO_DP = CountSetting()


class UncentredCount(AdaptiveClipping):
    """The broken variant of item 3: the count released uncentred (main before commit 2e01028)."""

    def noised_fraction(self, unclipped, expected_clients, generator=None, *, participants):
        count = torch.as_tensor(unclipped, dtype=torch.float64)
        noise = torch.randn(count.shape, generator=generator, dtype=torch.float64) * self.stddev(expected_clients)
        return (count + noise) / float(expected_clients)  # sum_i b_i: one client moves it by 1


def upper_bound(errors: int, trials: int, beta: float) -> float:
    """Clopper-Pearson upper bound on a rate, one-sided at confidence ``1 - beta``."""
    return 1.0 if errors >= trials else float(beta_distribution.ppf(1.0 - beta, errors + 1, trials - errors))


def bound_from_rates(fpr: float, fnr: float, delta: float) -> float:
    """The epsilon that ``(epsilon, delta)``-DP needs to allow these error rates (0 if none)."""
    bounds = [0.0]
    for a, b in ((fpr, fnr), (fnr, fpr)):  # TPR <= e^eps FPR + delta, and the same with the roles swapped
        if a > 0 and 1.0 - delta - b > a:
            bounds.append(math.log((1.0 - delta - b) / a))
    return max(bounds)


def threshold_bound(
    out_scores: torch.Tensor, in_scores: torch.Tensor, threshold: float, setting: CountSetting
) -> float:
    """The empirical epsilon of the test "``D'`` when the score exceeds ``threshold``", at ``1 - beta``."""
    n_out, n_in = len(out_scores), len(in_scores)
    false_pos, false_neg = int((out_scores > threshold).sum()), int((in_scores <= threshold).sum())
    half = setting.beta / 2.0  # the two upper bounds hold together at 1 - beta
    return bound_from_rates(upper_bound(false_pos, n_out, half), upper_bound(false_neg, n_in, half), setting.delta)


def largest_showable(setting: CountSetting) -> float:
    """The bound with no error on either side among the measuring half of the trials."""
    n = setting.trials // 2
    zero = upper_bound(0, n, setting.beta / 2.0)
    return bound_from_rates(zero, zero, setting.delta)


def released_scores(setting: CountSetting, with_canary: bool, generator: torch.Generator, variant: str) -> torch.Tensor:
    """The score (sum over the ``T`` rounds of the released ``b~``) of every trial on ``D`` or ``D'``."""
    rule = (UncentredCount if variant == "uncentred" else AdaptiveClipping)(count_stddev=setting.count_stddev)
    m = setting.expected_clients
    participants = torch.full((setting.trials,), m + int(with_canary), dtype=torch.float64)
    unclipped = torch.full((setting.trials,), m // 2 + int(with_canary), dtype=torch.float64)
    score = torch.zeros(setting.trials, dtype=torch.float64)
    for _ in range(setting.rounds):
        score += rule.noised_fraction(unclipped, m, generator, participants=participants)
    return score


def audit(setting: CountSetting = FEDDPO_DP, variant: str = "correct", seed: int = 0) -> dict:
    """One many-trial audit of the count channel: the empirical epsilon next to the claimed one."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    started = time.perf_counter()
    generator = torch.Generator().manual_seed(seed)
    out_scores = released_scores(setting, False, generator, variant)
    in_scores = released_scores(setting, True, generator, variant)
    half = setting.trials // 2
    choose_out, measure_out = out_scores[:half], out_scores[half:]
    choose_in, measure_in = in_scores[:half], in_scores[half:]
    candidates = torch.quantile(choose_out[:1_000_000], torch.tensor(THRESHOLD_QUANTILES, dtype=torch.float64))
    threshold = max(candidates.tolist(), key=lambda t: threshold_bound(choose_out, choose_in, t, setting))
    empirical = threshold_bound(measure_out, measure_in, threshold, setting)
    claimed = setting.epsilon()
    return {
        "setting": f"count of feddpo_dp: sigma_b {setting.count_stddev:g}, m {setting.expected_clients}, "
        f"{setting.rounds} rounds at rate 1",
        "variant": variant,
        "seed": seed,
        "trials_per_side": setting.trials,
        "delta": setting.delta,
        "claimed_epsilon": claimed,
        "claimed_epsilon_prv": setting.epsilon("prv"),
        "largest_showable": largest_showable(setting),
        "threshold": threshold,
        "empirical_epsilon": empirical,
        "flagged": empirical > claimed,
        "seconds": time.perf_counter() - started,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--trials", type=int, default=FEDDPO_DP.trials, help="runs of the mechanism per side")
    parser.add_argument("--out", default=None, help="append one JSON line per audit here")
    args = parser.parse_args(argv)
    setting = CountSetting(trials=args.trials)
    out = open(args.out, "a") if args.out else None  # noqa: SIM115
    for seed in args.seeds:
        for variant in VARIANTS:
            row = audit(setting, variant, seed)
            print(
                f"{variant:<10} seed {seed}: claimed {row['claimed_epsilon']:.2f}"
                f" (PRV {row['claimed_epsilon_prv']:.2f}),"
                f" showable {row['largest_showable']:.2f}, empirical {row['empirical_epsilon']:.2f},"
                f" flagged {row['flagged']} ({row['seconds']:.1f} s)",
                flush=True,
            )
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
    if out:
        out.close()


if __name__ == "__main__":
    main()
