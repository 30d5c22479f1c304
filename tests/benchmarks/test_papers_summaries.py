"""The papers' scripts' verdict lines against values worked out by hand: the paired difference of
a method and its baseline (``papers/common.py``, used by ``fedhds.py``, ``fedbiot.py``,
``openfedllm.py``) and the method against its baseline's construction value 0.500
(``papers/fedpdpo.py``, ``papers/fedbiscuit.py``), with the seed and sampling parts of the
error. docs/results.md's table is checked against these lines in test_papers_results_table.py."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "papers"))

import common  # noqa: E402
import fedbiscuit  # noqa: E402
import fedpdpo  # noqa: E402


def test_paired_splits_the_error_into_seed_spread_and_row_sampling():
    # a - b: seed 0 rows (1, 2), mean 1.5; seed 1 rows (2, 2), mean 2: difference 1.75
    # seed SE: SD(1.5, 2) / sqrt(2) = 0.354 / 1.414 = 0.25; rows averaged over seeds (1.5, 2): SD 0.354 / sqrt(2) = 0.25
    # combined sqrt(0.25^2 + 0.25^2) = 0.354; df 2 (t 4.303): 1.75 / 0.354 = 4.9 SE: above
    p = common.paired({0: [1, 2], 1: [3, 3], 2: [9, 9]}, {0: [0, 0], 1: [1, 1]})  # seed 2: a only, left out
    assert p.seeds == 2 and p.diff == 1.75
    assert (round(p.se_seed, 6), round(p.se_sample, 6), round(p.se, 6)) == (0.25, 0.25, round(0.25 * 2**0.5, 6))
    assert round(p.df, 6) == 2 and common.call(p, "above", "below") == "above"
    assert common.call(p._replace(diff=-p.crit * p.se), "above", "below") == "not separated"  # exactly t SE
    assert common.call(p._replace(diff=-1.01 * p.crit * p.se), "above", "below") == "below"
    assert common.paired({0: [1.0]}, {1: [1.0]}) is None


def test_paired_with_one_seed_has_only_the_sampling_part():
    # rows (3, 1) - (1, 1) = (2, 0): mean 1, SD 1.414 / sqrt(2) = 1
    p = common.paired({0: [3, 1]}, {0: [1, 1]})
    assert (p.diff, p.se_seed, round(p.se_sample, 6), round(p.se, 6), p.seeds) == (1.0, 0.0, 1.0, 1.0, 1)


def test_two_runs_of_one_method_and_seed_are_refused_not_one_kept():
    runs = [{"method": "fedit", "seed": 0, "x": 1}, {"method": "fedit", "seed": 1}, {"method": "fedit", "seed": 0}]
    with pytest.raises(ValueError, match="two runs of fedit seed 0: keep one per file"):
        common.by_method(runs)
    assert common.by_method(runs[:2])["fedit"][0]["x"] == 1


def test_fedhds_row_against_fedit_and_the_coreset_pair():
    import fedhds

    def run(method, seed, rouge, frac=0.02):
        return {
            "method": method, "seed": seed, "rougeL": rouge, "nll": [2.0, 4.0], "data_fraction": frac,
            "trained_samples": int(96 * frac), "test_task": ["t1", "t2"],
        }  # fmt: skip

    # FedHDS - FedIT: seed 0 (0.2 - 0.5, 0.2 - 0.3) mean -0.2; seed 1 (0.2 - 0.4, 0.0 - 0.4) mean -0.3: -0.25
    # seed SE SD(-0.2, -0.3) / sqrt(2) = 0.05; prompts averaged over seeds (-0.25, -0.25): sampling 0
    # df = S - 1 = 1, t 12.71: -5 SE is not decided (the old fixed 2 SE called it lower)
    # FedHDS's own ROUGE-L: per seed 0.2, 0.1: mean 0.150, SD 0.071
    results = [
        run("fedit", 0, [0.5, 0.3], 1.0), run("fedit", 1, [0.4, 0.4], 1.0),
        run("fedhds", 0, [0.2, 0.2]), run("fedhds", 1, [0.2, 0.0]),
        run("random", 0, [0.2, 0.1]), run("random", 1, [0.1, 0.1]),
    ]  # fmt: skip
    lines = fedhds.summarize(results)
    assert (
        "| fedhds | [0, 1] | 0.150 | 0.071 | 3.000 | 2.0% | 1 | -0.250 ± 0.050 (seed SE 0.050, sampling SE 0.000 "
        "over 2 tasks, 2 seeds; 5.0 SE, df 1.0, t 12.71) | not separated |" in lines
    )
    assert "| fedit | [0, 1] | 0.400 | 0.000 | 3.000 | 100.0% | 96 | - | - |" in lines
    assert "fedhds minus fedit per seed: 0: -0.200, 1: -0.300; per task: t1 -0.250, t2 -0.250" in lines
    # FedHDS - Random: seed 0 (0, 0.1) mean 0.05; seed 1 (0.1, -0.1) mean 0: +0.025
    # seed SE SD(0.05, 0) / sqrt(2) = 0.025; prompts (0.05, 0), one a task: CR1 2 x (0.025^2 x 2) / 4 = 0.025^2
    # combined 0.035, df 2, t 4.30
    assert (
        "fedhds minus random: +0.025 ± 0.035 (seed SE 0.025, sampling SE 0.025 over 2 tasks, 2 seeds; "
        "0.7 SE, df 2.0, t 4.30): not separated" in lines
    )


def test_fedhds_runs_recording_task_names_pair_with_earlier_runs_recording_none():
    """The earlier runs record no test_task (their prompts lie in sorted task order, test_per_task
    each); a later run records the names: the two compare as the same test set, and a run whose
    prompts lie in another order is refused."""
    import fedhds

    def run(method, seed, **extra):
        return {"method": method, "seed": seed, "rougeL": [0.5, 0.5, 0.1, 0.3], "nll": [1.0], "data_fraction": 1.0,
                "trained_samples": 4, **extra}  # fmt: skip

    old = run("fedit", 0, args={"test_per_task": 2, "held_out": 2})
    lines = fedhds.summarize([old, run("fedhds", 0, test_task=["a", "a", "b", "b"])])
    assert "fedhds minus fedit per seed: 0: +0.000; per task: 0 +0.000, 1 +0.000" in lines
    with pytest.raises(ValueError, match="the runs do not share one test set"):
        fedhds.summarize([old, run("fedhds", 0, test_task=["b", "a", "a", "b"])])


def test_fedbiot_line_clusters_the_rows_by_client():
    import fedbiot

    def run(method, seed, loss):
        final = {"adapemu_loss": loss, "adapfu_loss": loss, "client": [0, 1]}
        return {"method": method, "seed": seed, "lr": 0.01, "final": final}

    # FedOT - FedBiOT: seed 0 rows (1, 1), seed 1 rows (2, 0): both seeds 1.0, seed SE 0
    # rows averaged over seeds (1.5, 0.5), one a client: CR1 2 x (0.5^2 x 2) / 4 = 0.25: SE 0.5; df 1, t 12.71
    results = [run("fedot", 0, [2, 2]), run("fedot", 1, [3, 1]), run("fedbiot", 0, [1, 1]), run("fedbiot", 1, [1, 1])]
    lines = fedbiot.summarize(results)
    expected = (
        "+1.000 ± 0.500 nats/token (seed SE 0.000, sampling SE 0.500 over 2 clients, 2 seeds; 2.0 SE, df 1.0, "
        "t 12.71): not separated"
    )
    assert f"FedOT minus FedBiOT, adapfu_loss: {expected}" in lines
    assert "  per seed: 0: +1.000, 1: +1.000" in lines
    assert "  per client (rows): 0 +1.500 (1), 1 +0.500 (1)" in lines
    assert "| fedot | 0.01 | [0, 1] | 2.000 (0.000) | 2.000 (0.000) | 2 |" in lines


def test_openfedllm_lines_for_held_out_tasks_and_own_task():
    import openfedllm

    def run(method, held_out, own):
        own = {"a": own[:1], "b": own[1:]}
        return {"method": method, "seed": 0, "held_out": held_out, "held_out_task": ["x", "y"], "own": own}

    # held-out: (1 - 2, 2 - 2) = (-1, 0), one a task: -0.5, CR1 2 x (0.5^2 x 2) / 4 = 0.25: SE 0.5; df 1, t 12.71
    # own task: (1 - 0.5, 1 - 0.5): +0.5 ± 0: local better
    lines = openfedllm.summarize([run("fedit", [1, 2], [1, 1]), run("local", [2, 2], [0.5, 0.5])])
    assert (
        "FedIT minus local, held-out tasks: -0.500 ± 0.500 nats/token (seed SE 0.000, sampling SE 0.500 over 2 tasks, "
        "1 seed; 1.0 SE, df 1.0, t 12.71): not separated" in lines
    )
    own = next(x for x in lines if x.startswith("FedIT minus local, own task"))
    assert own.startswith("FedIT minus local, own task: +0.500 ± 0.000") and own.endswith("local better")
    assert "  per task (share of the sum): a +0.500 (50%), b +0.500 (50%)" in lines


def _biscuit(seed: int, pair_scores: list[float]) -> dict:
    """A FedBiscuit run whose 4 users all score ``pair_scores`` (one entry a test pair)."""
    pairs = [[i, i] for i in range(len(pair_scores))]  # pair i: positive sentence i, negative sentence i
    acc = {u: pair_scores for u in fedbiscuit.USERS}
    return {"method": "fedbiscuit", "seed": seed, "assignment": {}, "acc": acc, "pair_sentences": pairs}


def test_fedbiscuit_against_one_selector_clusters_the_sampling_error_by_sentence():
    # pair means minus 0.5: seed 0 (0.5, 0), seed 1 (0, 0): +0.125; seed SE SD(0.25, 0) / sqrt(2) = 0.125
    # sampling: (0.25, 0), each pair its own sentences, so two-way = one-way: CR1 2 x (0.125^2 x 2) / 4: 0.125
    # combined 0.177, df 2, t 4.30: not separated
    lines = fedbiscuit.summarize([_biscuit(0, [1.0, 0.5]), _biscuit(1, [0.5, 0.5])])
    line = next(x for x in lines if x.startswith("FedBiscuit minus 0.500"))
    assert line.endswith(
        "2 pairs: +0.125 ± 0.177 (seed SE 0.125, sampling SE 0.125 over 2 sentences a side, 2 seeds; 0.7 SE, "
        "df 2.0, t 4.30): not separated"
    )


def test_fedbiscuit_clearly_above_one_selector_is_called_better():
    # pair means minus 0.5, both seeds (0.5, 0.5, 0.25): +0.417, seed SE 0; residuals (1/12, 1/12, -1/6):
    # CR1 3 / 2 x (1/144 + 1/144 + 1/36) / 9 = 1/144: SE 0.083; df 2, t 4.30: 5.0 SE, better
    lines = fedbiscuit.summarize([_biscuit(0, [1.0, 1.0, 0.75]), _biscuit(1, [1.0, 1.0, 0.75])])
    line = next(x for x in lines if x.startswith("FedBiscuit minus 0.500"))
    assert "+0.417 ± 0.083" in line and "5.0 SE, df 2.0, t 4.30" in line and line.endswith("FedBiscuit better")


def _pdpo(seed: int, acc: float) -> dict:
    clients = {c: acc for c in "0123"}
    return {"method": "fedpdpo", "seed": seed, "initial": None, "final": {"all": acc, "clients": clients}}


def test_fedpdpo_against_a_global_model_counts_fedpdpo_seeds_and_binomial_sampling():
    # seeds 0.55, 0.57: +0.060; seed SE SD / sqrt(2) = 0.01
    # sampling: 4 clients x 0.56 x 0.44 / 64 rows / 16 -> sqrt = 0.031; combined 0.033: 1.8 SE
    # df = 0.0326^4 / (0.01^4 / 1 + 0.031^4 / 15) = 15.7, t 2.12: not separated
    lines = fedpdpo.summarize([_pdpo(0, 0.55), _pdpo(1, 0.57)], test_rows_per_client=64)
    line = next(x for x in lines if x.startswith("FedPDPO minus 0.500"))
    assert "+0.060 ± 0.033 (seed SE 0.010, sampling SE 0.031 over 16 sentences a side, 2 seeds; 1.8 SE" in line
    assert line.endswith("not separated")
    assert "  per seed: 0: 0.550, 1: 0.570" in lines


def test_fedbiot_real_text_clients_and_public_set_are_disjoint_tasks(tmp_path):
    """``papers/fedbiot.py --bigbench``: one task a client, the public set from other tasks,
    each client ``per_client + held_per_client`` rows of its own task."""
    import argparse
    import json

    import fedbiot

    for t in range(8):
        task = {
            "description": f"Task {t}: answer.",
            "examples": [{"input": f"q {t} {i}", "target": f"a{i}"} for i in range(12)],
        }
        (tmp_path / "bb" / f"task{t}").mkdir(parents=True)
        (tmp_path / "bb" / f"task{t}" / "task.json").write_text(json.dumps(task))
    args = argparse.Namespace(
        bigbench=str(tmp_path / "bb"), data_seed=0, clients=3, per_client=4, held_per_client=6, public_tasks=2,
        public_rows=5, max_length=128, max_input_words=40, max_output_words=10, max_instruction_words=40,
    )  # fmt: skip
    info = fedbiot.bigbench_data(args, tmp_path / "out")
    rows = [json.loads(x) for x in (tmp_path / "out" / "clients.jsonl").read_text().splitlines()]
    public = [json.loads(x) for x in (tmp_path / "out" / "public.jsonl").read_text().splitlines()]
    assert len(info["clients"]) == 3 and len(info["public_tasks"]) == 2
    assert not set(info["clients"]) & set(info["public_tasks"])
    assert sorted({r["task"] for r in rows}) == info["clients"]
    assert all(sum(r["task"] == t for r in rows) == 10 for t in info["clients"])
    assert len(public) == 5 and {r["task"] for r in public} <= set(info["public_tasks"])


def test_fedpdpo_with_per_pair_scores_clusters_them_by_sentence():
    # 2 pairs, drawn as polarity_pairs draws them (seed 0 of the 16 x 16 combinations); each user's
    # score on each pair recorded (lightning-fed test grouped by cell). Users' pair scores:
    # u0, u1 (1, 0), u2, u3 (1, 1): pair means (1, 0.5), minus 0.5: (0.5, 0); both seeds alike:
    # +0.25, seed SE 0; the 2 pairs share no sentence, so two-way = one-way over 2 clusters:
    # CR1 2 x (0.25^2 x 2) / 4 = 0.0625: SE 0.25, df 1, t 12.71
    import polarity_pairs

    (p0, n0), (p1, n1) = polarity_pairs.pair_sentences(2)
    assert p0 != p1 and n0 != n1
    pairs = {"u0": [1.0, 0.0], "u1": [1.0, 0.0], "u2": [1.0, 1.0], "u3": [1.0, 1.0]}
    final = {"all": 0.75, "clients": {"0": 0.5, "1": 0.5, "2": 1.0, "3": 1.0}}
    runs = [{"method": "fedpdpo", "seed": s, "initial": None, "final": final, "pairs": pairs} for s in (0, 1)]
    lines = fedpdpo.summarize(runs, test_rows_per_client=2)
    line = next(x for x in lines if x.startswith("FedPDPO minus 0.500, per pair"))
    assert line.endswith(
        "+0.250 ± 0.250 (seed SE 0.000, sampling SE 0.250 over 2 sentences a side, 2 seeds; 1.0 SE, df 1.0, "
        "t 12.71): not separated"
    )
    # per-pair scores that are not the fit's per-client accuracy are refused
    runs[0] = {**runs[0], "final": {"all": 0.75, "clients": {"0": 0.6, "1": 0.5, "2": 1.0, "3": 1.0}}}
    with pytest.raises(ValueError, match="seed 0: per-pair scores"):
        fedpdpo.summarize(runs, test_rows_per_client=2)


def test_fedpdpo_against_feddpo_per_pair_pairs_each_client_by_pair_and_sentence():
    # 2 pairs sharing no sentence (two-way = one-way over 2 clusters), two identical seeds (seed SE 0).
    # FedPDPO as above: u0, u1 (1, 0), u2, u3 (1, 1). FedDPO, one global model: u0, u1 (0, 1) and the
    # other taste its complement, u2, u3 (1, 0); its pair means are 0.5 each.
    # Mean over users: (1, 0.5) - (0.5, 0.5) = (0.5, 0): +0.25, CR1 2 x (0.25^2 x 2) / 4: SE 0.25.
    # u0: (1, 0) - (0, 1) = (1, -1): +0.0, residuals +-1: CR1 2 x 2 / 4 = 1: SE 1.0.
    # u2: (1, 1) - (1, 0) = (0, 1): +0.5, residuals -+0.5: CR1 2 x 0.5 / 4 = 0.25: SE 0.5. df 1, t 12.71.
    pdpo = {"u0": [1.0, 0.0], "u1": [1.0, 0.0], "u2": [1.0, 1.0], "u3": [1.0, 1.0]}
    dpo = {"u0": [0.0, 1.0], "u1": [0.0, 1.0], "u2": [1.0, 0.0], "u3": [1.0, 0.0]}

    def run(method, pairs, seed):
        clients = {str(i): sum(pairs[u]) / 2 for i, u in enumerate(sorted(pairs))}
        final = {"all": sum(clients.values()) / 4, "clients": clients}
        return {"method": method, "seed": seed, "initial": None, "final": final, "pairs": pairs}

    runs = [run(m, p, s) for s in (0, 1) for m, p in (("fedpdpo", pdpo), ("feddpo", dpo))]
    lines = fedpdpo.summarize(runs, test_rows_per_client=2)
    tail = "2 seeds; {} SE, df 1.0, t 12.71): not separated"
    assert "FedPDPO minus FedDPO, per pair two-way by sentence: +0.250 ± 0.250 (seed SE 0.000, sampling SE 0.250 " \
        "over 2 sentences a side, " + tail.format("1.0") in lines  # fmt: skip
    assert "  client 0 (u0), per pair: +0.000 ± 1.000 (seed SE 0.000, sampling SE 1.000 over 2 sentences a side, " \
        + tail.format("0.0") in lines  # fmt: skip
    assert "  client 2 (u2), per pair: +0.500 ± 0.500 (seed SE 0.000, sampling SE 0.500 over 2 sentences a side, " \
        + tail.format("1.0") in lines  # fmt: skip
    assert lines[-1] == "clients where FedPDPO is better, per pair (decided): 0 of 4"
    # FedDPO's per-pair scores are checked against its fit's per-client accuracy too
    runs[1] = {**runs[1], "final": {"all": 0.5, "clients": {"0": 0.6, "1": 0.5, "2": 0.5, "3": 0.5}}}
    with pytest.raises(ValueError, match="seed 0: per-pair scores"):
        fedpdpo.summarize(runs, test_rows_per_client=2)
