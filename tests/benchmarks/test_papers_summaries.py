"""The papers' scripts' verdict lines against values worked out by hand: the method against its
baseline's construction value 0.500 (``papers/fedpdpo.py``, ``papers/fedbiscuit.py``), with the
seed and sampling parts of the error."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "papers"))

import fedbiscuit  # noqa: E402
import fedpdpo  # noqa: E402


def _biscuit(seed: int, pair_scores: list[float]) -> dict:
    """A FedBiscuit run whose 4 users all score ``pair_scores`` (one entry a test pair)."""
    return {"method": "fedbiscuit", "seed": seed, "assignment": {}, "acc": {u: pair_scores for u in fedbiscuit.USERS}}


def test_fedbiscuit_against_one_selector_clusters_the_sampling_error_by_test_pair():
    # pair means: seed 0 (1, 0.5), seed 1 (0.5, 0.5): mean 0.625, +0.125 over 0.500
    # seed SE: SD(0.75, 0.5) / sqrt(2) = 0.125; sampling: SD over pairs of (0.75, 0.5) / sqrt(2) = 0.125
    # combined sqrt(2) x 0.125 = 0.177 > 0.125 / 2: not separated
    lines = fedbiscuit.summarize([_biscuit(0, [1.0, 0.5]), _biscuit(1, [0.5, 0.5])])
    line = next(x for x in lines if x.startswith("FedBiscuit minus 0.500"))
    assert "+0.125 ± 0.177 (seed SE 0.125, sampling SE 0.125 over 2 pairs, 2 seeds [0, 1]): not separated" in line


def test_fedbiscuit_clearly_above_one_selector_is_called_better():
    # every pair 1.0 in seed 0, 0.75 in seed 1: +0.375, seed SE 0.125, sampling SE 0 -> 3 SE
    lines = fedbiscuit.summarize([_biscuit(0, [1.0, 1.0, 1.0]), _biscuit(1, [0.75, 0.75, 0.75])])
    line = next(x for x in lines if x.startswith("FedBiscuit minus 0.500"))
    assert "+0.375 ± 0.125" in line and line.endswith("FedBiscuit better")


def _pdpo(seed: int, acc: float) -> dict:
    clients = {c: acc for c in "0123"}
    return {"method": "fedpdpo", "seed": seed, "initial": None, "final": {"all": acc, "clients": clients}}


def test_fedpdpo_against_a_global_model_counts_fedpdpo_seeds_and_binomial_sampling():
    # seeds 0.55, 0.57: +0.060; seed SE SD / sqrt(2) = 0.01
    # sampling: 4 clients x 0.56 x 0.44 / 64 rows / 16 -> sqrt = 0.031; combined 0.033: 1.8 SE
    lines = fedpdpo.summarize([_pdpo(0, 0.55), _pdpo(1, 0.57)], test_rows_per_client=64)
    line = next(x for x in lines if x.startswith("FedPDPO minus 0.500"))
    assert "+0.060 ± 0.033 (seed SE 0.010, sampling SE 0.031, 2 seeds [0, 1]): not separated" in line


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
