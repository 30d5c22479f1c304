"""SecAgg+'s fixed-point encoding as simulated in process, by hand values (no model, no Flower run)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lightning_fed.deploy.secure_aggregation import Contribution, SecureAggregation, quantization_error_bound
from lightning_fed.privacy import ClientLevelDP
from lightning_fed.strategies import FedAvg, Scaffold
from lightning_fed.strategies.base import ClientUpdate


def _secagg(**kwargs) -> SecureAggregation:
    args = {"clipping_range": 1.0, "quantization_range": 4, "modulus_range": 256, "max_weight": 4.0, **kwargs}
    return SecureAggregation(FedAvg(), **args)


def _c(cid: int, values: list[float], weight: float = 4.0) -> Contribution:
    return Contribution(cid, [np.array(values, dtype=np.float32)], weight)


def test_values_on_the_grid_are_summed_exactly():
    # R = 1, Q = 4: grid step 2R/Q = 0.5; (v + 1) * 2 -> 0.5: 3, -1.0: 0, 0.0: 2, 1.0: 4 (no rounding).
    # Sums 5 and 4, weight factors 4 + 4 = 8; decode: (5 * 0.5 - 1 - 1) * 4/8 = 0.25, (4 * 0.5 - 2) * 4/8 = 0.
    mean = _secagg().simulate([_c(0, [0.5, -1.0]), _c(1, [0.0, 1.0])], round_idx=0)
    np.testing.assert_array_equal(mean[0], [0.25, 0.0])


def test_weights_are_quantized_and_divide_the_sum():
    # R = 1, Q = 8 (step 0.25), max_weight 4: weights 2 and 4 -> r = 0.5 and 1 (factors 4 and 8).
    # 0.5 * 1.0 = 0.5 -> (1.5) * 4 = 6; 1 * -0.25 -> (0.75) * 4 = 3; sum 9, factors 12:
    # (9 * 0.25 - 1 - 1) * 8/12 = 1/6 = (2 * 1.0 + 4 * -0.25) / 6, the weighted mean.
    mean = _secagg(quantization_range=8).simulate([_c(0, [1.0], 2.0), _c(1, [-0.25], 4.0)], round_idx=0)
    assert mean[0][0] == pytest.approx(1 / 6, abs=1e-12)


def test_values_beyond_the_range_are_clipped():
    mean = _secagg().simulate([_c(0, [3.0, -7.0]), _c(1, [1.0, -1.0])], round_idx=0)
    np.testing.assert_array_equal(mean[0], [1.0, -1.0])  # 3 -> 1, -7 -> -1


def test_stochastic_rounding_is_off_by_less_than_a_step_and_unbiased():
    """0.3 lies between the grid points 0.0 and 0.5: it is rounded up with probability 0.6.

    Over 2000 seeds the mean's standard error is 0.5 * sqrt(0.24 / 2000) = 0.0055; the margin
    0.03 is over five of them.
    """
    secagg, values = _secagg(), []
    for seed in range(2000):
        secagg.seed = seed
        (mean,) = secagg.simulate([_c(0, [0.3])], round_idx=0)
        assert mean[0] in (0.0, 0.5)
        assert abs(mean[0] - 0.3) < quantization_error_bound(1.0, 4)
        values.append(mean[0])
    assert np.mean(values) == pytest.approx(0.3, abs=0.03)


def test_error_of_the_mean_is_within_the_bound():
    """The bound of the module docstring: |S| * (2R / Q) / sum_k r_k per coordinate."""
    rng = np.random.default_rng(0)
    secagg = SecureAggregation(FedAvg(), clipping_range=0.5, quantization_range=2**10, max_weight=100.0)
    weights = [10.0, 30.0, 100.0, 55.0]
    arrays = [rng.uniform(-0.5, 0.5, size=1000).astype(np.float32) for _ in weights]
    contributions = [Contribution(k, [a / (w / 100.0)], w) for k, (a, w) in enumerate(zip(arrays, weights))]
    ratios = [round(w / 100.0 * 2**10) / 2**10 for w in weights]
    exact = sum(r * c.arrays[0].astype(np.float64) for r, c in zip(ratios, contributions)) / sum(ratios)
    (mean,) = secagg.simulate(contributions, round_idx=3)
    bound = len(weights) * quantization_error_bound(0.5, 2**10) / sum(ratios)
    assert np.abs(mean - exact).max() < bound
    assert np.abs(mean - exact).max() > bound / 100  # the grid is coarse: the error is visible


def test_same_seed_same_rounding_and_the_seed_depends_on_round_and_client():
    secagg = _secagg(quantization_range=2**10, modulus_range=2**16)
    vec = [_c(0, list(np.linspace(-0.9, 0.9, 50))), _c(1, list(np.linspace(0.9, -0.9, 50)))]
    first, again = secagg.simulate(vec, 0), secagg.simulate(vec, 0)
    np.testing.assert_array_equal(first[0], again[0])
    assert not np.array_equal(first[0], secagg.simulate(vec, 1)[0])
    assert secagg.rounding_seed(0, 1) != secagg.rounding_seed(0, 0)


def test_the_sum_must_fit_the_modulus():
    with pytest.raises(ValueError, match=r"64 clients \* quantization_range=4 must be < modulus_range=256"):
        _secagg().check_capacity(64)


def test_bad_settings_are_one_line_errors_naming_them():
    with pytest.raises(ValueError) as err:
        SecureAggregation(Scaffold(), protocol="secagg", num_shares=2, modulus_range=1000)
    msg = str(err.value)
    assert "\n" not in msg
    for part in (
        "protocol must be one of ('secagg+',)",
        "federation.strategy.strategy=Scaffold cannot",
        "num_shares",
        "modulus_range",
    ):
        assert part in msg


def test_distributed_noise_shares_sum_to_the_central_noise():
    """m = 4 clients with z = 2, C = 0.5 each add N(0, (z C)^2 / m): std 0.5; their sum's std is z C = 1.

    4 x 20000 coordinates: the sample std's relative standard error is ~0.5%; margin 3%.
    """
    dp = ClientLevelDP(FedAvg(), noise_multiplier=2.0, clip_norm=0.5, expected_clients=4, seed=1)
    secagg = SecureAggregation(dp, clipping_range=8.0)
    assert secagg.noise_share_stddev() == pytest.approx(0.5)
    x = {"w": torch.zeros(20000)}
    shares = [
        secagg.contribution(x, ClientUpdate(k, 7, {"w": torch.zeros(20000)}), round_idx=0).arrays[0] for k in range(4)
    ]
    assert np.std(shares[0]) == pytest.approx(0.5, rel=0.03)
    assert np.std(np.sum(shares, axis=0)) == pytest.approx(1.0, rel=0.03)


def test_with_dp_the_update_is_clipped_weights_are_uniform_and_the_sum_divided_by_m():
    # Two clients, C = 1, z = 0: y - x = (3, 4) (norm 5) -> (0.6, 0.8); (0, 0.5) unchanged.
    # Sum (0.6, 1.3) / m = 4 -> (0.15, 0.325), whatever the clients' example counts.
    dp = ClientLevelDP(FedAvg(), noise_multiplier=0.0, clip_norm=1.0, expected_clients=4, seed=0)
    secagg = SecureAggregation(dp, clipping_range=1.0, quantization_range=2**20, max_weight=1.0)
    x = {"w": torch.tensor([1.0, 1.0])}
    ups = [ClientUpdate(0, 10, {"w": torch.tensor([4.0, 5.0])}), ClientUpdate(1, 90, {"w": torch.tensor([1.0, 1.5])})]
    out = secagg.aggregate(x, ups)
    step = quantization_error_bound(1.0, 2**20)
    torch.testing.assert_close(out["w"], torch.tensor([1.15, 1.325]), atol=2 * step, rtol=0)
    assert dp.rounds_done == 1 and secagg.rounds_done == 1
