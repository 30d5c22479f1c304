"""``benchmarks/papers/common.py``'s error model on examples worked out by hand: the seed part,
the sampling part clustered by the unit of the claim, the Welch-Satterthwaite degrees of
freedom and the decision at Student's t (not a fixed 2 SE)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "papers"))

import common  # noqa: E402

# 2 seeds x 4 items in 2 clusters (items 0-1: task A, items 2-3: task B), method minus baseline:
# seed 0 (1, 1, 3, 3), seed 1 (3, 3, 5, 5)
A = {0: [1, 1, 3, 3], 1: [3, 3, 5, 5]}
B = {0: [0, 0, 0, 0], 1: [0, 0, 0, 0]}
TASKS = ["A", "A", "B", "B"]


def test_two_clusters_two_seeds_worked_by_hand():
    # per-seed means 2 and 4: difference 3; seed SE = SD(2, 4) / sqrt(2) = 1.414 / 1.414 = 1
    # items averaged over seeds (2, 2, 4, 4); cluster means 2 and 4: CR1 variance
    #   G / (G - 1) x sum_g (sum of residuals in g)^2 / n^2 = 2 x ((-2)^2 + 2^2) / 16 = 1: sampling SE 1
    # combined sqrt(2) = 1.414; df = 2^2 / (1 / 1 + 1 / 1) = 2; t(0.975, 2) = 4.303 (any t table)
    p = common.paired(A, B, TASKS)
    assert (p.diff, p.se_seed, p.seeds, p.clusters) == (3.0, 1.0, 2, 2)
    assert p.se_sample == pytest.approx(1.0) and p.se == pytest.approx(2**0.5)
    assert p.df == pytest.approx(2.0) and p.crit == pytest.approx(4.303, abs=5e-4)
    assert p.per_seed == (2.0, 4.0) and p.k == pytest.approx(3 / 2**0.5)
    # 2.1 SE: past the old fixed 2 SE, short of t with 2 df: not decided
    assert common.call(p, "above", "below") == "not separated"
    assert p.describe(" nats", "tasks") == (
        "+3.000 ± 1.414 nats (seed SE 1.000, sampling SE 1.000 over 2 tasks, 2 seeds; 2.1 SE, df 2.0, t 4.30)"
    )


def test_ignoring_the_clusters_understates_the_sampling_error_on_correlated_items():
    # the negative control: the same items as independent: SD(2, 2, 4, 4) / sqrt(4) = 1.155 / 2 = 0.577 < 1
    unclustered = common.paired(A, B)
    assert unclustered.se_sample == pytest.approx(np.std([2, 2, 4, 4], ddof=1) / 2)
    assert unclustered.se_sample < common.paired(A, B, TASKS).se_sample
    assert unclustered.clusters == 4  # one item a cluster: the plain Var(e) / n


def test_one_item_a_cluster_is_the_plain_standard_error():
    e = [0.3, -0.1, 0.4, 0.0, 0.2]
    se, g = common.sampling_se(e)
    assert g == 5 and se == pytest.approx(np.std(e, ddof=1) / np.sqrt(5))


def test_two_way_with_one_side_the_items_themselves_is_the_one_way_error():
    # V_a + V_item - V_(a, item) = V_a: the item clusters cancel their intersection
    e = [0.5, 0.1, -0.2, 0.4, 0.0, 0.3]
    a = [0, 0, 1, 1, 2, 2]
    one, g1 = common.sampling_se(e, a)
    two, g2 = common.sampling_se(e, a, list(range(6)))
    assert two == pytest.approx(one) and (g1, g2) == (3, 3)


def test_decision_rule_is_student_t_at_the_combined_degrees_of_freedom():
    # one seed: only the sampling part, df = clusters - 1; d = (2, 0) in 2 clusters: SE 1, df 1, t 12.706
    p = common.paired({0: [3, 1]}, {0: [1, 1]}, ["x", "y"])
    assert (p.diff, p.se_seed, p.se_sample, p.df) == (1.0, 0.0, pytest.approx(1.0), pytest.approx(1.0))
    assert p.crit == pytest.approx(12.706, abs=5e-4)
    # a dominant seed part with 3 seeds: seed SE SD(0.1, 0.25, 0.4) / sqrt(3) = 0.15 / 1.732 = 0.0866,
    # sampling 0.01 over 40 clusters: df = 0.0872^4 / (0.0866^4 / 2 + 0.01^4 / 39) = 2.05, t 4.20:
    # 2.9 SE (past the old fixed 2) is not decided
    q = common.combine(0.25, [0.1, 0.25, 0.4], 0.01, 40)
    assert q.se_seed == pytest.approx(0.15 / 3**0.5) and q.df == pytest.approx(2.05, abs=0.01)
    assert q.k == pytest.approx(2.87, abs=0.01) and common.call(q, "a", "b") == "not separated"
    # a construction baseline (a number) counts every seed of the method
    r = common.paired({0: [1.0, 0.5], 1: [0.5, 0.5]}, 0.5, [0, 1])
    assert (r.diff, r.seeds) == (0.125, 2)
    assert common.paired({0: [1.0]}, {1: [1.0]}) is None


def test_blocks_refuse_a_count_that_does_not_match():
    assert common.blocks(6, 3, 2) == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="36 test items are not 5 blocks of 6"):
        common.blocks(36, 6, 5)


def test_append_run_records_args_and_commit(tmp_path):
    out = tmp_path / "runs.jsonl"
    common.append_run(out, {"method": "m", "seed": 0}, {"rounds": 2})
    (run,) = common.read_runs([out])
    assert run["args"] == {"rounds": 2} and run["method"] == "m"
    assert run["commit"] is None or len(run["commit"]) == 40
