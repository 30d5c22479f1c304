import math

import pytest

from lightning_fed.federation.sampling import expected_clients, poisson_sample_clients


def test_poisson_sampling_is_deterministic_and_independent_per_client():
    a = poisson_sample_clients(100, 0.1, seed=3, round_idx=5)
    assert a == poisson_sample_clients(100, 0.1, seed=3, round_idx=5) == sorted(set(a))
    assert a != poisson_sample_clients(100, 0.1, seed=3, round_idx=6)
    assert poisson_sample_clients(7, 1.0, seed=0, round_idx=0) == list(range(7))


def test_poisson_round_sizes_are_binomial():
    """N = 50, q = 0.2, 2000 rounds: size mean 10, variance N q (1 - q) = 8.

    Mean of 2000 sizes: std sqrt(8 / 2000) = 0.063, tolerance 0.3 (> 4.7 std). Sample variance:
    relative std about sqrt(2 / 2000) = 3.2% (plus a little kurtosis), tolerance 15%.
    Each client is drawn with rate q: 2000 * 0.2 = 400 times, std sqrt(2000 * 0.16) = 17.9, tol 90.
    """
    sizes, counts = [], [0] * 50
    for r in range(2000):
        chosen = poisson_sample_clients(50, 0.2, seed=1, round_idx=r)
        sizes.append(len(chosen))
        for c in chosen:
            counts[c] += 1
    mean = sum(sizes) / len(sizes)
    var = sum((s - mean) ** 2 for s in sizes) / (len(sizes) - 1)
    assert abs(mean - 10.0) < 0.3
    assert var == pytest.approx(8.0, rel=0.15)
    assert max(abs(c - 400) for c in counts) < 90
    assert any(len(poisson_sample_clients(5, 0.1, 0, r)) == 0 for r in range(100))  # empty rounds happen


def test_expected_clients_and_bad_settings():
    assert expected_clients(40, "fixed_size", clients_per_round=8) == 8.0
    assert math.isclose(expected_clients(40, "poisson", rate=0.05), 2.0)
    with pytest.raises(ValueError, match=r"federation.sampling_rate must be in \(0, 1\], got 0.0"):
        poisson_sample_clients(10, 0.0, 0, 0)
    with pytest.raises(ValueError, match=r"federation.sampling must be one of \('fixed_size', 'poisson'\), got 'x'"):
        expected_clients(10, "x")
    with pytest.raises(ValueError, match="federation.clients_per_round=12 exceeds data.num_clients=10"):
        expected_clients(10, "fixed_size", clients_per_round=12)
