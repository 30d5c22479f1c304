"""FedBiscuit's selector losses as a client-side Gaussian mechanism: clip, noise scale, seeds, accounting."""

import math

import pytest
import torch
from opacus.accountants import RDPAccountant

from lightning_fed.federation.secret_seed import SecretSeed
from lightning_fed.privacy import PrivacyAccountant, PrivacyReport
from lightning_fed.privacy.accountant import composed_epsilon
from lightning_fed.privacy.selector_noise import (
    SELECTOR_NOISE_TAG,
    noised_selector_losses,
    selector_noise_seed,
    selector_noise_std,
)


def test_noise_std_by_hand():
    """sigma = z_s * L * sqrt(U): U = 4 coordinates each moving by L = 0.5 give sensitivity 1.0."""
    assert selector_noise_std(0.8, 0.5, 4) == pytest.approx(0.8)
    assert selector_noise_std(2.0, 1.0, 3) == pytest.approx(2.0 * math.sqrt(3))
    with pytest.raises(ValueError, match="noise_multiplier > 0, clip > 0 and num_selectors >= 1, got 0.0, 1.0, 3"):
        selector_noise_std(0.0, 1.0, 3)


def test_clip_to_zero_and_l_then_the_seeded_noise():
    losses = torch.tensor([-0.2, 0.5, 1.7])
    torch.testing.assert_close(noised_selector_losses(losses, 1.0, 0.0, seed=3), torch.tensor([0.0, 0.5, 1.0]))
    g = SecretSeed.of_int(3).generator("selector noise")
    noise = torch.from_numpy(g.standard_normal(3, dtype="float32")) * 0.25
    torch.testing.assert_close(noised_selector_losses(losses, 1.0, 0.25, seed=3), torch.tensor([0.0, 0.5, 1.0]) + noise)


def test_seed_from_the_run_or_from_the_os():
    assert selector_noise_seed(5, 2, 3) == SecretSeed.of_int(5).child("selector noise", SELECTOR_NOISE_TAG, 2, 3)
    assert len({selector_noise_seed(5, r, c) for r in range(3) for c in range(3)}) == 9
    assert selector_noise_seed(None, 2, 3) != selector_noise_seed(None, 2, 3)  # secret, fresh per draw


def test_noise_has_std_sigma_over_many_secret_draws():
    """2,000 rows of U = 10 selectors (20,000 draws), sigma = 0.5 * 1.0 * sqrt(10) = 1.58, losses at
    L / 2 so that the clip never binds. The sample std of n normal draws has relative standard error
    1 / sqrt(2 (n - 1)) = 0.005; the tolerance is 4 of them (2 %), the mean's is 4 sigma / sqrt(n)."""
    sigma = selector_noise_std(0.5, 1.0, 10)
    losses = torch.full((10,), 0.5)
    rows = torch.stack(
        [noised_selector_losses(losses, 1.0, sigma, selector_noise_seed(None, 0, 0)) for _ in range(2000)]
    )
    noise = (rows - 0.5).flatten()
    assert float(noise.std()) == pytest.approx(sigma, rel=4 / math.sqrt(2 * (noise.numel() - 1)))
    assert abs(float(noise.mean())) < 4 * sigma / math.sqrt(noise.numel())


@pytest.mark.parametrize("groupings", [1, 4])
def test_g_groupings_are_opacus_gaussian_at_rate_one(groupings):
    acc = PrivacyAccountant(1.5, 1.0, 1e-5)
    opacus = RDPAccountant()
    opacus.history = [(1.5, 1.0, groupings)]
    assert acc.epsilon(groupings) == pytest.approx(opacus.get_epsilon(delta=1e-5), rel=1e-12)


def test_update_and_selector_channels_compose_as_opacus_with_both_entries():
    update, selector = PrivacyAccountant(1.0, 0.5, 1e-5), PrivacyAccountant(2.0, 1.0, 1e-5)
    opacus = RDPAccountant()
    opacus.history = [(1.0, 0.5, 6), (2.0, 1.0, 2)]
    both = composed_epsilon([(update, 6), (selector, 2)], 1e-5)
    assert both == pytest.approx(opacus.get_epsilon(delta=1e-5), rel=1e-12)
    assert both > max(update.epsilon(6), selector.epsilon(2))  # composition costs more than either
    assert composed_epsilon([(update, 6), (selector, 0)], 1e-5) == pytest.approx(update.epsilon(6), rel=1e-12)


def test_report_lists_the_noised_channel_and_the_composed_client_epsilon():
    client, selector = PrivacyAccountant(1.0, 0.5, 1e-5, target_epsilon=9.0), PrivacyAccountant(2.0, 1.0, 1e-5)
    report = PrivacyReport(
        client_dp=client,
        selector_losses=True,
        selector_dp=selector,
        selector_groupings=2,
        selector_clip=1.0,
        counts_bucketed=True,
        metrics_withheld=True,
        losses_sent=False,
    )
    section = report.section(rounds=6)
    channel = section["channels"]["selector_losses"]
    assert channel["protection"] == "gaussian"
    assert channel["guarantees"] == [{"unit": "client", "epsilon": selector.epsilon(2), "delta": 1e-5}]
    assert section["epsilon"] == {
        "client": client.epsilon(6),
        "client_all_channels": composed_epsilon([(client, 6), (selector, 2)], 1e-5),
    }
    assert section["selector_losses"] == {
        "noise_multiplier": 2.0,
        "clip": 1.0,
        "sample_rate": 1.0,
        "groupings": 2,
        "delta": 1e-5,
        "accountant": "rdp",
    }
    assert section["client_level"]["target_epsilon"] == 9.0  # the budget stays the update channel's
    metrics = section["channels"]["metrics"]
    assert metrics["protection"] == "not_sent+withheld" and metrics["means"].startswith("the client does not send it")


def test_with_dp_sgd_alone_no_client_level_figure_covers_all_channels():
    section = PrivacyReport(
        example_dp=PrivacyAccountant(1.0, 0.1, 1e-5),
        selector_losses=True,
        selector_dp=PrivacyAccountant(1.0, 1.0, 1e-5),
        selector_groupings=1,
        selector_clip=1.0,
    ).section(rounds=2)
    assert section["epsilon"]["client_all_channels"] == "inf"  # the update has no client-level guarantee
    assert section["channels"]["selector_losses"]["guarantees"][0]["epsilon"] == PrivacyAccountant(
        1.0, 1.0, 1e-5
    ).epsilon(1)
