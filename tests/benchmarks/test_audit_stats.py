"""The audit statistics of ``benchmarks/audit_stats.py`` against values worked out by hand."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from audit_stats import empirical_epsilon, exposure, one_run_p_value  # noqa: E402


def test_exposure_is_log2_candidates_plus_one_minus_log2_rank():
    # one of 3 candidates is more likely (0.5 < 1.0): rank 2 among 4 strings -> 2 - 1 = 1 bit
    assert exposure(1.0, [2.0, 3.0, 0.5]) == pytest.approx(1.0)
    # most likely of 7 candidates: rank 1 -> log2(8) = 3 bits, the maximum
    assert exposure(0.0, [1.0] * 7) == pytest.approx(3.0)
    # a tie counts half: rank 1 + 0.5 among 4 strings
    assert exposure(1.0, [1.0, 2.0, 3.0]) == pytest.approx(2.0 - math.log2(1.5))


def test_p_value_without_delta_is_the_binomial_tail():
    # eps = 0: q = 1/2; all 4 of 4 guesses right: 1/16
    assert one_run_p_value(m=8, r=4, v=4, eps=0.0, delta=0.0) == pytest.approx(1 / 16)
    # eps = ln 3: q = 3/4; at least 1 of 2 right: 1 - 1/16
    assert one_run_p_value(m=8, r=2, v=1, eps=math.log(3), delta=0.0) == pytest.approx(15 / 16)


def test_p_value_delta_term():
    # q = 1/2, r = v = 2: f(2) = 1/4, f(1) = 3/4, f(0) = 1; max((3/4 - 1/4) / 1, (1 - 1/4) / 2) = 1/2;
    # 1/4 + 2 * m * delta * 1/2 with m = 10, delta = 0.01: 0.35
    assert one_run_p_value(m=10, r=2, v=2, eps=0.0, delta=0.01) == pytest.approx(0.35)


def test_empirical_epsilon_solves_q_to_the_r_equals_beta():
    # 16 of 16 right, delta = 0: q^16 = 0.05, q = 0.8293, eps = ln(q / (1 - q)) = 1.5808
    q = 0.05 ** (1 / 16)
    assert empirical_epsilon(m=32, r=16, v=16, delta=0.0) == pytest.approx(math.log(q / (1 - q)), abs=1e-3)
    # chance-level guessing proves nothing
    assert empirical_epsilon(m=32, r=16, v=8, delta=0.0) == 0.0
    # delta can only lower the bound
    assert empirical_epsilon(m=32, r=16, v=16, delta=1e-3) < empirical_epsilon(m=32, r=16, v=16, delta=0.0)
