import math

import pytest
import torch

from lightning_fed.privacy import AdaptiveClipping, update_noise_multiplier


def test_geometric_update_by_hand():
    # gamma = 0.5, eta = 0.2, no count noise; 3 of m = 4 unclipped: b~ = 0.75,
    # C <- 1 * exp(-0.2 * (0.75 - 0.5)) = exp(-0.05)
    rule = AdaptiveClipping(target_quantile=0.5, learning_rate=0.2, count_stddev=0.0)
    clip, fraction = rule.next_clip_norm(1.0, unclipped=3, expected_clients=4)
    assert fraction == pytest.approx(0.75)
    assert clip == pytest.approx(math.exp(-0.05))
    # 1 of 4 unclipped: b~ = 0.25 -> C grows by exp(0.05)
    clip, _ = rule.next_clip_norm(2.0, unclipped=1, expected_clients=4)
    assert clip == pytest.approx(2.0 * math.exp(0.05))


def test_count_noise_has_the_configured_stddev():
    """sigma_b = m / 20 = 0.5 for m = 10: the noised fraction's std is sigma_b / m = 0.05.

    4000 draws: the sample std's relative spread is 1 / sqrt(2 * 4000) = 1.1%; 5% is > 4 spreads.
    """
    rule = AdaptiveClipping()
    assert rule.stddev(10) == 0.5
    g = torch.Generator().manual_seed(0)
    fractions = torch.tensor([rule.next_clip_norm(1.0, 5, 10, g)[1] for _ in range(4000)])
    assert float(fractions.std()) == pytest.approx(0.05, rel=0.05)
    assert float(fractions.mean()) == pytest.approx(0.5, abs=4 * 0.05 / math.sqrt(4000))


def test_update_share_of_the_noise_theorem_1():
    # z = 1, sigma_b = 1: z_Delta = (1 - 1/4)^(-1/2) = 2 / sqrt(3)
    assert update_noise_multiplier(1.0, 1.0) == pytest.approx(2.0 / math.sqrt(3.0))
    # and back: (z_Delta^-2 + (2 sigma_b)^-2)^(-1/2) = z
    z_delta = update_noise_multiplier(0.8, 3.0)
    assert (z_delta**-2 + 6.0**-2) ** -0.5 == pytest.approx(0.8)
    assert update_noise_multiplier(0.0, 0.0) == 0.0
    with pytest.raises(ValueError, match=r"count_stddev=0.5 is too small for noise_multiplier=1.0"):
        update_noise_multiplier(1.0, 0.5)


def test_bad_settings_are_listed_together():
    with pytest.raises(ValueError, match=r"target_quantile must be in \[0, 1\], got 1.5; learning_rate must be > 0"):
        AdaptiveClipping(target_quantile=1.5, learning_rate=0.0)
