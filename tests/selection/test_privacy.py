"""DP centroids (Theorem 1): sigma from (epsilon, delta) and the noise it adds."""

import math

import numpy as np
import pytest

from lightning_fed.selection import HierarchicalDataSelection, gaussian_sigma, privatize_centroids


def test_sigma_is_the_gaussian_mechanism_with_sensitivity_two():
    # Theorem 1: sigma >= 2 sqrt(2 ln(1.25/delta)) / epsilon
    assert gaussian_sigma(0.5, 1e-5) == pytest.approx(2 * math.sqrt(2 * math.log(1.25e5)) / 0.5)
    assert gaussian_sigma(0.9, 0.1) == pytest.approx(2 * math.sqrt(2 * math.log(12.5)) / 0.9)
    assert gaussian_sigma(0.5, 1e-5) > gaussian_sigma(0.9, 1e-5)  # less budget, more noise


@pytest.mark.parametrize(("epsilon", "delta"), [(0.0, 1e-5), (1.0, 1e-5), (0.5, 0.0), (0.5, 1.0)])
def test_sigma_rejects_values_outside_the_theorem(epsilon, delta):
    with pytest.raises(ValueError, match="dp_"):
        gaussian_sigma(epsilon, delta)


def test_centroids_are_tanh_scaled_then_noised_with_the_prescribed_variance():
    rng = np.random.default_rng(0)
    centroids = rng.normal(0, 20, size=(100_000, 2))  # t-SNE-sized coordinates
    clean = privatize_centroids(centroids, 0.0, rng)
    assert np.all(np.abs(clean) <= 1.0) and np.allclose(clean, np.tanh(centroids))
    sigma = gaussian_sigma(0.5, 1e-3)
    noise = privatize_centroids(centroids, sigma, np.random.default_rng(1)) - np.tanh(centroids)
    assert abs(noise.mean()) < 0.02 * sigma
    assert noise.var() == pytest.approx(sigma**2, rel=0.02)


def test_hook_derives_sigma_from_epsilon_and_delta():
    # default dp_sensitivity="l2": a 2-D centroid has L2 sensitivity 2 * sqrt(2)
    hook = HierarchicalDataSelection(dp_epsilon=0.5, dp_delta=1e-3)
    assert hook.sigma == pytest.approx(gaussian_sigma(0.5, 1e-3, 2 * math.sqrt(2)))
    paper = HierarchicalDataSelection(dp_epsilon=0.5, dp_delta=1e-3, dp_sensitivity="paper")
    assert paper.sigma == pytest.approx(gaussian_sigma(0.5, 1e-3))  # Theorem 1's 2
    assert hook.sigma == pytest.approx(math.sqrt(2) * paper.sigma)
    assert HierarchicalDataSelection(dp_sigma=0.1).sigma == 0.1
    with pytest.raises(ValueError, match="at most one of `dp_epsilon` and `dp_sigma`"):
        HierarchicalDataSelection(dp_epsilon=0.5, dp_sigma=0.1)


def test_l2_sensitivity_of_a_2d_centroid_is_two_sqrt_two():
    """Theorem 1's sensitivity 2 is one element's range; the released 2-D vector can move by
    the diagonal of [-1, 1]^2: ||(1, 1) - (-1, -1)||_2 = sqrt(4 + 4) = 2 sqrt(2) ~ 2.83 > 2."""
    from lightning_fed.selection.privacy import centroid_sensitivity

    a, b = np.tanh(np.array([50.0, 50.0])), np.tanh(np.array([-50.0, -50.0]))  # two tanh-scaled centroids
    assert np.linalg.norm(a - b) == pytest.approx(2 * math.sqrt(2))
    assert centroid_sensitivity(2) == pytest.approx(2 * math.sqrt(2))
    assert centroid_sensitivity(2, "paper") == 2.0 < centroid_sensitivity(2)
    assert centroid_sensitivity(3) == pytest.approx(2 * math.sqrt(3))  # a 3-D fusion: 2 sqrt(3)
    with pytest.raises(ValueError, match=r"`dp_sensitivity` must be one of \('l2', 'paper'\)"):
        centroid_sensitivity(2, "linf")


def _exact_gaussian_epsilon(mu: float, delta: float) -> float:
    """The tight epsilon of mu-GDP (Dong, Roth & Su 2019): solve
    delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) for eps."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    return brentq(lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2) - delta, 0.0, 500.0)


@pytest.mark.parametrize(("z", "k"), [(4.0, 1), (4.0, 16), (10.0, 100)])
def test_composed_epsilon_against_the_exact_gaussian_composition(z, k):
    """k Gaussian releases with noise multiplier z are exactly one with mu = sqrt(k) / z.
    RDP must upper-bound the exact epsilon; PRV must be within 3% of it."""
    from lightning_fed.selection.privacy import composed_epsilon

    delta = 1e-5
    exact = _exact_gaussian_epsilon(math.sqrt(k) / z, delta)
    rdp = composed_epsilon(z, k, delta, "rdp")
    prv = composed_epsilon(z, k, delta, "prv")
    assert exact <= rdp <= 1.6 * exact, (exact, rdp)
    assert prv == pytest.approx(exact, rel=0.03), (exact, prv)
    # RDP of the Gaussian (q = 1) is k alpha / (2 z^2): k releases at z == 1 release at z / sqrt(k)
    assert rdp == pytest.approx(composed_epsilon(z / math.sqrt(k), 1, delta, "rdp"), rel=1e-9)


def test_accountant_counts_releases_per_client_and_resumes():
    from lightning_fed.selection.privacy import CentroidAccountant, composed_epsilon

    acc = CentroidAccountant(sigma=8.0, sensitivity=2.0, delta=1e-5)  # noise multiplier 8 / 2 = 4
    acc.record(0, 3)  # round 1: client 0 sends 3 centroids, client 1 sends 2
    acc.record(1, 2)
    acc.record(0, 1)  # round 2: client 0 again, 1 centroid
    assert acc.releases == {0: 4, 1: 2}
    report = acc.report()
    assert report["noise_multiplier"] == 4.0 and report["clients"]["0"]["releases"] == 4
    assert report["clients"]["0"]["epsilon"] == pytest.approx(composed_epsilon(4.0, 4, 1e-5))
    assert report["clients"]["0"]["epsilon"] > report["clients"]["1"]["epsilon"] > 0  # more releases, more loss
    assert report["max_epsilon"] == report["clients"]["0"]["epsilon"]
    resumed = CentroidAccountant(sigma=8.0, sensitivity=2.0, delta=1e-5)
    resumed.load_state_dict(acc.state_dict())
    assert resumed.report() == report
    assert composed_epsilon(4.0, 0, 1e-5) == 0.0 and composed_epsilon(0.0, 3, 1e-5) == math.inf


def test_hook_accounts_every_sent_centroid():
    """On planted data: each sampled client's releases = the centroids it sent, in the summary."""
    from tests.selection.conftest import planted, stand_in_server, tiny_sft
    from tests.selection.test_hds import turbo

    module = tiny_sft()
    dm = planted(module, num_clients=3, per_client=30, families=("uppercase", "last_word", "count_words"), per=3)
    hook = turbo(dp_sigma=0.5, tsne_iters=250)
    sel = hook.choose(stand_in_server(dm), None, module, 0, [0, 2])
    sent = sel.up_bytes // (4 * 2)  # float32 x 2-D per centroid
    assert sum(hook.accountant.releases.values()) == sent and set(hook.accountant.releases) == {0, 2}
    privacy = hook.summary()["privacy"]
    assert privacy["sensitivity"] == pytest.approx(2 * math.sqrt(2)) and privacy["sigma"] == 0.5
    assert set(privacy["clients"]) == {"0", "2"} and all(
        0 < v["epsilon"] < math.inf for v in privacy["clients"].values()
    )
    assert HierarchicalDataSelection(dp_sigma=0.0).accountant is None  # tanh only: nothing to account
