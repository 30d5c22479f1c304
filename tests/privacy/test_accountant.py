import math

import numpy as np
import pytest
from opacus.accountants import RDPAccountant

from lightning_fed.privacy import PrivacyAccountant, PrivacyConfig, accounted_sample_rate, calibrate_noise_multiplier


def _gaussian_closed_form(z: float, steps: int, delta: float) -> float:
    """T unsampled Gaussian mechanisms: RDP T * a / (2 z^2) at order a (Mironov 2017, Prop. 7,
    composed by Prop. 1), converted by Balle et al. 2020 Thm. 21 (Opacus' conversion),
    minimised over Opacus' default orders."""
    a = np.array(RDPAccountant.DEFAULT_ALPHAS, dtype=float)
    eps = steps * a / (2 * z**2) - (math.log(delta) + np.log(a)) / (a - 1) + np.log((a - 1) / a)
    return float(eps.min())


@pytest.mark.parametrize(("z", "steps"), [(1.0, 1), (2.0, 10), (5.0, 100)])
def test_unsampled_rounds_match_the_closed_form(z, steps):
    acc = PrivacyAccountant(noise_multiplier=z, sample_rate=1.0, delta=1e-5)
    assert acc.epsilon(steps) == pytest.approx(_gaussian_closed_form(z, steps, 1e-5), rel=1e-9)


def test_composition_across_rounds():
    # Gaussian RDP is linear in T / z^2: 4 rounds at z = 2 cost exactly one round at z = 1.
    assert PrivacyAccountant(2.0, 1.0, 1e-5).epsilon(4) == pytest.approx(PrivacyAccountant(1.0, 1.0, 1e-5).epsilon(1))
    acc = PrivacyAccountant(1.1, 0.01, 1e-5)
    spent = [acc.step() for _ in range(5)]
    assert spent == sorted(spent) and len(set(spent)) == 5  # strictly grows with every round
    assert spent[-1] == acc.epsilon(5)
    # sampling amplifies: the same rounds at q = 0.01 cost far less than at q = 1
    assert acc.epsilon(5) < PrivacyAccountant(1.1, 1.0, 1e-5).epsilon(5) / 5


def test_published_value_of_the_sampled_gaussian():
    """Opacus' (TF Privacy's) documented example: z = 1.0 at q = 1e-5 for 10 steps, then z = 3.0 at
    q = 1e-4 for 4 steps, delta = 1e-5, orders 2..32 -> epsilon 0.336 (order 23). Our accountant
    per mechanism plus RDP composition must give the same; the z = 1 part dominates it, so our
    accountant alone (Opacus' default orders) gives almost the same."""
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    orders = list(range(2, 33))
    rdp = compute_rdp(q=1e-5, noise_multiplier=1.0, steps=10, orders=orders) + compute_rdp(
        q=1e-4, noise_multiplier=3.0, steps=4, orders=orders
    )
    eps, order = get_privacy_spent(orders=orders, rdp=rdp, delta=1e-5)
    assert round(float(eps), 3) == 0.336 and int(order) == 23
    assert PrivacyAccountant(1.0, 1e-5, 1e-5).epsilon(10) == pytest.approx(0.336, abs=0.002)


def test_calibration_meets_the_budget_within_opacus_tolerance():
    z = calibrate_noise_multiplier(target_epsilon=2.0, delta=1e-5, sample_rate=0.05, steps=100)
    acc = PrivacyAccountant(z, 0.05, 1e-5, target_epsilon=2.0)
    assert 2.0 - 0.01 <= acc.epsilon(100) <= 2.0
    assert PrivacyAccountant(0.95 * z, 0.05, 1e-5).epsilon(100) > 2.0  # a smaller z would not do


def test_would_exceed_stops_before_the_budget():
    budget = PrivacyAccountant(1.0, 0.1, 1e-5).epsilon(20)  # exactly 20 rounds fit
    acc = PrivacyAccountant(1.0, 0.1, 1e-5, target_epsilon=budget)
    assert not acc.would_exceed(19)  # round 19 (0-based) is the 20th
    assert acc.would_exceed(20)
    assert not PrivacyAccountant(1.0, 0.1, 1e-5).would_exceed(10**6)  # no budget, never stops


def test_impossible_budget_is_one_line_naming_the_options():
    with pytest.raises(ValueError) as info:
        calibrate_noise_multiplier(target_epsilon=0.01, delta=1e-5, sample_rate=1.0, steps=10)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "federation.privacy.target_epsilon=0.01 with federation.privacy.delta=1e-05 cannot be reached over 10 rounds"
    )
    assert "raise federation.privacy.target_epsilon or federation.privacy.delta, lower federation.rounds" in message


def test_sampling_decides_the_accounted_rate():
    assert accounted_sample_rate("poisson", 100, rate=0.05) == 0.05
    assert accounted_sample_rate("fixed_size", 100, clients_per_round=5) == 1.0  # no amplification claimed


def test_config_plans_before_training():
    acc = PrivacyConfig(target_epsilon=4.0).plan(num_clients=1000, rounds=50, sampling="poisson", sampling_rate=0.02)
    assert acc.delta == 1e-5  # min(1000^-1.1 = 5.0e-4, 1e-5)
    assert acc.sample_rate == 0.02 and acc.epsilon(50) <= 4.0
    fixed = PrivacyConfig(noise_multiplier=1.0, delta=1e-6).plan(100, 10, "fixed_size", clients_per_round=10)
    assert fixed.target_epsilon is None and fixed.sample_rate == 1.0
    budget = PrivacyConfig(target_epsilon=2.0, noise_multiplier=1.0).plan(100, 10, "poisson", sampling_rate=0.1)
    assert (budget.noise_multiplier, budget.target_epsilon) == (1.0, 2.0)  # z given, the budget enforced
    with pytest.raises(
        ValueError, match="^client-level DP needs federation.privacy.target_epsilon, federation.privacy"
    ):
        PrivacyConfig().plan(100, 10, "poisson", sampling_rate=0.1)  # delta and report_validation only
    with pytest.raises(
        ValueError, match=r"privacy.delta must be in \(0, 1\) or null, got 2; federation.privacy.accountant must"
    ):
        PrivacyConfig(noise_multiplier=1.0, delta=2, accountant="moments")
