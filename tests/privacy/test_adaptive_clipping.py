import math
import re

import pytest
import torch

from lightning_fed.privacy import AdaptiveClipping, ClientLevelDP, update_noise_multiplier
from lightning_fed.privacy.adaptive_clipping import COUNT_SENSITIVITY, total_noise_multiplier
from lightning_fed.strategies import ClientUpdate, FedAvg


def test_geometric_update_by_hand():
    # gamma = 0.5, eta = 0.2, no count noise; 3 of m = 4 unclipped: b~ = 0.75,
    # C <- 1 * exp(-0.2 * (0.75 - 0.5)) = exp(-0.05)
    rule = AdaptiveClipping(target_quantile=0.5, learning_rate=0.2, count_stddev=0.0)
    clip, fraction = rule.next_clip_norm(1.0, unclipped=3, expected_clients=4, participants=4)
    assert fraction == pytest.approx(0.75)
    assert clip == pytest.approx(math.exp(-0.05))
    # 1 of 4 unclipped: b~ = 0.25 -> C grows by exp(0.05)
    clip, _ = rule.next_clip_norm(2.0, unclipped=1, expected_clients=4, participants=4)
    assert clip == pytest.approx(2.0 * math.exp(0.05))


def test_count_noise_has_the_configured_stddev():
    """sigma_b = m / 20 = 0.5 for m = 10: the noised fraction's std is sigma_b / m = 0.05.

    4000 draws: the sample std's relative spread is 1 / sqrt(2 * 4000) = 1.1%; 5% is > 4 spreads.
    """
    rule = AdaptiveClipping()
    assert rule.stddev(10) == 0.5
    g = torch.Generator().manual_seed(0)
    fractions = torch.tensor([rule.next_clip_norm(1.0, 5, 10, g, participants=10)[1] for _ in range(4000)])
    assert float(fractions.std()) == pytest.approx(0.05, rel=0.05)
    assert float(fractions.mean()) == pytest.approx(0.5, abs=4 * 0.05 / math.sqrt(4000))


def test_update_share_of_the_noise_theorem_1():
    # z = 1, sigma_b = 1: z_Delta = (1 - 1/4)^(-1/2) = 2 / sqrt(3)
    assert update_noise_multiplier(1.0, 1.0) == pytest.approx(2.0 / math.sqrt(3.0))
    # and back: (z_Delta^-2 + (2 sigma_b)^-2)^(-1/2) = z
    z_delta = update_noise_multiplier(0.8, 3.0)
    assert (z_delta**-2 + 6.0**-2) ** -0.5 == pytest.approx(0.8)
    assert update_noise_multiplier(0.0, 0.0) == 0.0
    with pytest.raises(ValueError, match=r"count_stddev=0.5 is too small for the client-level noise multiplier 1 "):
        update_noise_multiplier(1.0, 0.5)


def test_bad_settings_are_listed_together():
    with pytest.raises(
        ValueError,
        match=r"target_quantile must be in \[0, 1\], got 1.5; federation.strategy.adaptive.learning_rate must be > 0",
    ):
        AdaptiveClipping(target_quantile=1.5, learning_rate=0.0)


def _released_count(participants_norms, m=16):
    """``m * b~`` that ClientLevelDP releases for participants with these update norms (C = 1, no
    count noise: sigma_b = 0, z = 0, so the release is the count's exact function of the data)."""
    x = {"w": torch.zeros(1)}
    dp = ClientLevelDP(FedAvg(), noise_multiplier=0.0, clip_norm=1.0, expected_clients=m,
                       adaptive=AdaptiveClipping(0.5, 0.2, count_stddev=0.0))  # fmt: skip
    dp.setup(x, 64)
    dp.aggregate(x, [ClientUpdate(i, 1, {"w": torch.tensor([n])}) for i, n in enumerate(participants_norms)])
    return m * dp.last_round["unclipped_fraction"]


def test_one_client_moves_the_released_count_by_one_half():
    """Adding one client (unclipped or clipped) to a round moves the count ClientLevelDP releases by
    exactly 1/2 either way: the sensitivity Theorem 1's split assumes (centred, as TensorFlow
    Privacy's QuantileEstimatorQuery). The uncentred count moves by 1 for an unclipped client."""
    base = [0.5, 2.0, 0.3]  # C = 1: two unclipped, one clipped
    for extra in (0.1, 3.0):
        moved = _released_count([*base, extra]) - _released_count(base)
        assert abs(moved) == pytest.approx(COUNT_SENSITIVITY)
    assert COUNT_SENSITIVITY == 0.5


def test_feddpo_dp_split_by_hand():
    """configs/feddpo_dp.yaml: z = 1.383 (calibrated for epsilon 4), count_stddev sigma_b = 2. The
    update gets z_Delta = (1.383^-2 - 4^-2)^(-1/2) = 1.47390; with the count's sensitivity as
    released (measured above: 1/2), the two together are the Gaussian mechanism with
    (z_Delta^-2 + (sigma_b / 1/2)^-2)^(-1/2) = 1.383, the configured z (the uncentred count,
    sensitivity 1, gave 1.1865: epsilon 5.12 reported as 4)."""
    z, sigma_b = 1.383, 2.0
    z_delta = update_noise_multiplier(z, sigma_b)
    assert z_delta == pytest.approx(1.47390, abs=1e-5)
    sensitivity = abs(_released_count([0.5, 0.1]) - _released_count([0.5]))
    effective = (z_delta**-2 + (sigma_b / sensitivity) ** -2) ** -0.5
    assert effective == pytest.approx(z, abs=1e-9)
    assert total_noise_multiplier(z_delta, sigma_b) == pytest.approx(z, abs=1e-9)


def test_the_centred_count_by_hand():
    # |S| = 3 of m = 4, 2 unclipped, no noise: b~ = (2 - 3/2) / 4 + 1/2 = 0.625
    rule = AdaptiveClipping(target_quantile=0.5, learning_rate=0.2, count_stddev=0.0)
    clip, fraction = rule.next_clip_norm(1.0, unclipped=2, expected_clients=4, participants=3)
    assert fraction == pytest.approx(0.625)
    assert clip == pytest.approx(math.exp(-0.2 * 0.125))
    with pytest.raises(ValueError, match=r"unclipped=4 must be in \[0, participants=3\]"):
        rule.next_clip_norm(1.0, unclipped=4, expected_clients=4, participants=3)


def test_the_count_release_runs_batched_as_in_a_round():
    """``noised_fraction`` is what ``next_clip_norm`` releases (same generator, same b~), and on a
    tensor of trials each gets its own draw (the count audit, ``benchmarks/count_audit.py``, runs it
    so): sigma_b / m = 2 / 16 = 0.125; 4000 trials, the std's relative spread 1.1%, 5% is > 4 spreads."""
    rule = AdaptiveClipping(count_stddev=2.0)
    _, fraction = rule.next_clip_norm(1.0, 8, 16, torch.Generator().manual_seed(3), participants=16)
    assert float(rule.noised_fraction(8, 16, torch.Generator().manual_seed(3), participants=16)) == fraction
    trials = rule.noised_fraction(torch.full((4000,), 9.0), 16, torch.Generator().manual_seed(0),
                                  participants=torch.full((4000,), 17.0))  # fmt: skip
    assert trials.shape == (4000,)
    assert float(trials.std()) == pytest.approx(0.125, rel=0.05)
    assert float(trials.mean()) == pytest.approx((9 - 8.5) / 16 + 0.5, abs=4 * 0.125 / math.sqrt(4000))


def test_a_count_without_noise_beside_update_noise_is_refused_by_the_class_as_by_the_precheck():
    """Red team 10 row 6c: the class's line is the precheck's (lightning_fed/wrapper_rules.count_noise_problem);
    no noise at all (``noise_multiplier: 0``) keeps a noiseless count."""
    line = (
        "federation.strategy.adaptive.count_stddev must be > 0 with a noise multiplier above 0 (adaptive clipping"
        " needs 2 * count_stddev > noise_multiplier), got 0.0"
    )
    with pytest.raises(ValueError, match=re.escape(line)):
        ClientLevelDP(FedAvg(), noise_multiplier=1.0, adaptive=AdaptiveClipping(count_stddev=0.0))
    ClientLevelDP(FedAvg(), noise_multiplier=0.0, adaptive=AdaptiveClipping(count_stddev=0.0))
