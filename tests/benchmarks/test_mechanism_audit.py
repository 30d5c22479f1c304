"""The white-box one-run audit of ``benchmarks/mechanism_audit.py`` can fail (issue 32, item 9):
its largest showable bound exceeds every shipped private config's epsilon, each deliberately broken
mechanism is flagged, and the package's mechanism is not. The adaptive clip's count, which a one-run
audit cannot attribute to a canary, is audited by many trials (``benchmarks/count_audit.py``): the
uncentred count is flagged, the package's is not.

The tests run ``m = 2^12`` canaries (the benchmark: ``2^15``) so that each audit takes seconds.
Measured spread (m = 2^12, seeds 0-4, with ``ClientLevelDP`` no longer saving its noise seed):
the correct mechanism's empirical epsilon is 0.43-0.73 against the accountant's 4.00 (feddpo_dp,
guesses (1/4, 0)), 0.00-0.29 against 1.55 (q = 0.01, 400 rounds, guesses (1/16, 0)), 0.34-0.60
against 2.61 (DP-SGD, 10 steps of fedit_dpsgd) and 1.02-1.13 against 7.99 (fedit_dpsgd's 100
steps, guesses (0.48, 0.48)). The broken variants (seed 0): noise / 10 and the seed in the checkpoint 5.72 (every guess
right) against 4.00; the public sample 3.64 against 1.55; DP-SGD with noise / 10 5.72 against
2.61. So the margins are above 2 on either side; by Theorem 3 a correct mechanism is flagged with
probability at most 5% per audit, and far less here, where the audit is loose. On main
(``ClientLevelDP`` saves its seed, issue 32 item 2) the attacker regenerates the noise and the
package's own mechanism is flagged: those tests are expected failures until the seed is gone.
"""

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from scipy.stats import binom

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from audit_stats import empirical_epsilon, largest_showable, one_run_audit, one_run_p_value  # noqa: E402
from count_audit import FEDDPO_DP, released_scores  # noqa: E402
from count_audit import audit as count_audit  # noqa: E402
from count_audit import largest_showable as count_largest_showable  # noqa: E402
from mechanism_audit import CANARIES, CONTROLS, SHIPPED, audit, coins  # noqa: E402

from lightning_fed.privacy import ClientLevelDP  # noqa: E402
from lightning_fed.strategies import FedAvg  # noqa: E402

M = 2**12
CONFIGS = Path(__file__).resolve().parents[2] / "lightning_fed" / "configs"
#: On main ClientLevelDP saves its noise seed with the server's state (issue 32, item 2): the audit
#: then regenerates the noise and rightly flags the package's own mechanism.
LEAKS_SEED = "seed" in ClientLevelDP(FedAvg(), 1.0, 1.0).state_dict()
seed_fixed = pytest.mark.xfail(LEAKS_SEED, reason="ClientLevelDP.state_dict holds the noise seed (item 2)", strict=True)


def _p_value_reference(m, r, v, eps, delta):
    """Theorem 3 as the public implementation writes it (cumulative pmf, running max over i)."""
    q = 1 / (1 + math.exp(-eps))
    tail, best, cumulative = binom.sf(v - 1, r, q), 0.0, 0.0
    for i in range(1, v + 1):
        cumulative += binom.pmf(v - i, r, q)
        best = max(best, cumulative / i)
    return min(1.0, tail + 2 * m * delta * best)


@pytest.mark.parametrize(("m", "r", "v", "eps", "delta"), [(1000, 200, 180, 1.0, 1e-5), (4096, 2048, 2040, 4.0, 1e-5)])
def test_p_value_matches_the_cumulative_form_of_theorem_3(m, r, v, eps, delta):
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(_p_value_reference(m, r, v, eps, delta), rel=1e-9)


def test_the_old_audit_could_not_fail_and_this_one_can():
    """64 canaries with 32 guesses show at most 2.32; 2^15 with every canary guessed show 8.24. The
    2 m delta term caps the bound near 8.2 at delta 1e-5 (2^10 to 2^19 canaries)."""
    assert empirical_epsilon(64, 32, 32, 1e-5) == pytest.approx(2.32, abs=0.01)
    showable = largest_showable(CANARIES, 1e-5)
    assert showable == pytest.approx(8.24, abs=0.01)
    assert max(largest_showable(2**k, 1e-5) for k in range(10, 20)) < 8.3


def _private_configs():
    """Every shipped config with a DP mechanism (ClientLevelDP anywhere in its strategy, or DP-SGD)."""
    for path in sorted(CONFIGS.glob("*.yaml")):
        cfg = yaml.safe_load(path.read_text())
        text = json.dumps(cfg)  # the parsed config: a comment naming ClientLevelDP does not count
        if '"lightning_fed.privacy.ClientLevelDP"' in text or '"dp_sgd":' in text:
            yield path.stem, cfg


def test_the_audit_can_show_more_than_each_shipped_private_config_spends():
    """For every shipped private config (found in configs/, not listed by hand) the audit holds a
    setting with the config's budget, rounds (steps) and accounted sample rate, and its largest
    showable bound exceeds that setting's accountant epsilon and is reached by a perfect score (the
    guesses, 48% "in" and 48% "out", are all right whatever the coins). secagg.yaml shipped z = 1 at rate 1 over
    10 rounds (epsilon 19.05, beyond any one-run audit); it now calibrates z for epsilon 8."""
    found = dict(_private_configs())
    assert set(found) == set(SHIPPED) == {"feddpo_dp", "fedit_dpsgd", "secagg"}
    for name, cfg in found.items():
        setting, fed = SHIPPED[name], cfg["federation"]
        if setting.unit == "client":
            target = fed["privacy"]["target_epsilon"]
            rate = fed["sampling_rate"] if fed.get("sampling") == "poisson" else 1.0
            assert (setting.sample_rate, setting.steps) == (rate, fed["rounds"]), name
        else:  # DP-SGD: rounds x local steps, at rate B / 32 (57 training examples bucketed to 32)
            target = cfg["model"]["init_args"]["dp_sgd"]["target_epsilon"]
            assert setting.steps == fed["rounds"] * fed["local_steps"], name
            assert setting.sample_rate == cfg["data"]["init_args"]["batch_size"] / 32, name
        assert target - 0.01 <= setting.epsilon() <= target, name
        showable = largest_showable(setting.canaries, setting.delta, setting.guesses)
        assert showable > setting.epsilon(), name
        # reachable: a score that separates the included canaries perfectly gets every guess right
        for seed in range(3):
            included = coins(setting.canaries, torch.Generator().manual_seed(seed))
            perfect = one_run_audit([float(i) for i in included], included, setting.delta, setting.guesses)
            assert perfect == showable > setting.epsilon(), (name, seed)


def test_one_run_audit_counts_top_and_bottom_guesses():
    scores = [5.0, 4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0]
    included = [True, True, False, True, False, False, True, False]
    # top 2 guessed in (both right), bottom 2 out (index 6 wrong, 7 right): 3 of 4
    assert one_run_audit(scores, included, 0.0, (0.25, 0.25)) == empirical_epsilon(8, 4, 3, 0.0)


@pytest.mark.parametrize("variant", ["noise/10", "public_sample", "seed_in_checkpoint"])
def test_each_broken_mechanism_is_flagged(variant):
    row = audit(replace(CONTROLS[variant], canaries=M), variant, seed=0)
    assert row["flagged"], row
    # measured: +2.09 to +1.72 on an idle machine, +1.46 (public_sample) in a CI run beside a CPU-bound
    # job (2026-11-29): the margin is 1.0, under the lowest seen; `flagged` is the claim
    assert row["empirical_epsilon"] > row["accountant_epsilon"] + 1.0, row


@seed_fixed
@pytest.mark.parametrize("control", ["noise/10", "public_sample"])
def test_the_package_mechanism_is_not_flagged_where_its_broken_variants_are(control):
    for seed in range(3):
        row = audit(replace(CONTROLS[control], canaries=M), "correct", seed=seed)
        assert not row["flagged"], row


def test_dp_sgd_with_a_tenth_of_the_noise_is_flagged_and_as_accounted_is_not():
    setting = replace(CONTROLS["dp_sgd noise/10"], canaries=M)
    row = audit(setting, "noise/10", seed=0)
    assert row["flagged"] and row["empirical_epsilon"] > row["accountant_epsilon"] + 1.0, row
    for seed in range(3):
        for checked in (setting, replace(SHIPPED["fedit_dpsgd"], canaries=M)):
            row = audit(checked, "correct", seed=seed)
            assert not row["flagged"], row


def test_the_count_audit_runs_the_package_release_and_the_uncentred_one_moves_twice_as_far():
    """With no count noise the score is the release's exact function of the data: the canary moves
    the sum of T = 10 released fractions by T * (1/2) / m (centred, the package's
    ``AdaptiveClipping.noised_fraction``) or T * 1 / m (uncentred)."""
    setting = replace(FEDDPO_DP, count_stddev=0.0, trials=4)
    for variant, sensitivity in (("correct", 0.5), ("uncentred", 1.0)):
        g = torch.Generator().manual_seed(0)
        moved = released_scores(setting, True, g, variant) - released_scores(setting, False, g, variant)
        assert moved.tolist() == pytest.approx([10 * sensitivity / 16] * 4), variant


def test_the_count_audit_can_fail_and_flags_the_uncentred_count():
    """The count channel of feddpo_dp (sigma_b = 2, m = 16, 10 rounds at rate 1; claimed 3.62, Opacus
    RDP at noise multiplier 2 sigma_b = 4) audited with 10^6 trials per side (the benchmark: 2 * 10^6).
    Its largest showable bound (11.82) exceeds the claim. Measured spread (10^6 trials, seeds 0-4):
    the package's centred count 2.37-2.56, the uncentred count (main before the fix) 4.65-5.20: both
    about 1.0 from the claim, on either side. Each audit about 1 s of CPU."""
    setting = replace(FEDDPO_DP, trials=1_000_000)
    assert setting.epsilon() == pytest.approx(3.62, abs=0.01)
    assert count_largest_showable(setting) > setting.epsilon() + 5.0
    for seed in range(3):
        row = count_audit(setting, "correct", seed)
        assert not row["flagged"] and row["empirical_epsilon"] < row["claimed_epsilon"] - 0.5, row
        row = count_audit(setting, "uncentred", seed)
        assert row["flagged"] and row["empirical_epsilon"] > row["claimed_epsilon"] + 0.5, row
