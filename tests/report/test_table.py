"""The report's table equals the figures worked out by hand from the run files."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lightning_fed.report.cli import main as report
from lightning_fed.report.runs import load_run
from lightning_fed.report.table import Stat, percentile


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "report.csv", newline="") as f:
        return list(csv.DictReader(f))


def _last_round_clients(run: Path, metric: str) -> list[float]:
    files = sorted((run / "client_metrics" / "val").glob("round_*.parquet"))
    return pq.read_table(files[-1]).column(metric).to_pylist()


def test_percentiles_interpolate_linearly_as_the_runs_own_statistics():
    # 4 clients: p10 at position 0.1 * 3 = 0.3 between the 1st and 2nd smallest
    assert percentile([4.0, 1.0, 3.0, 2.0], 10) == pytest.approx(1.0 + 0.3 * (2.0 - 1.0))
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    assert Stat([1.0, 2.0, 4.0]).text() == "2.333 ± 1.528"  # sd with n - 1: sqrt(((4/3)^2+(1/3)^2+(5/3)^2)/2)
    assert Stat([0.5]).text() == "0.500" and Stat([]).text() == "-"


def test_table_numbers_equal_those_computed_by_hand_from_the_files(tiny_runs, tmp_path):
    comparable = [str(tiny_runs[k]) for k in ("fedavg/s0", "fedavg/s1", "fedprox/s0")]
    assert report([*comparable, "--metric", "loss", "--out", str(tmp_path)]) == 0
    rows = {r["group"]: r for r in _rows(tmp_path)}
    assert sorted(rows) == ["method=DPOModule/FedAvg, partition=default", "method=DPOModule/FedProx, partition=default"]
    fedavg = rows["method=DPOModule/FedAvg, partition=default"]
    assert (fedavg["table"], fedavg["runs"], fedavg["seeds"], fedavg["metric"]) == ("1", "2", "0,1", "loss")

    summaries = [json.loads((tiny_runs[k] / "summary.json").read_text()) for k in ("fedavg/s0", "fedavg/s1")]
    final = [s["final"]["val"]["loss"] for s in summaries]
    initial = [s["initial"]["val"]["loss"] for s in summaries]
    assert float(fedavg["final_mean"]) == pytest.approx((final[0] + final[1]) / 2)
    assert float(fedavg["final_sd"]) == pytest.approx(abs(final[0] - final[1]) / 2**0.5)  # n - 1 = 1
    # a loss: the gain is how much it went down
    gains = [i - f for i, f in zip(initial, final)]
    assert float(fedavg["gain_mean"]) == pytest.approx((gains[0] + gains[1]) / 2)
    assert float(fedavg["initial_mean"]) == pytest.approx((initial[0] + initial[1]) / 2)

    # per client: the last evaluated round's Parquet file, 4 clients; p10 at 0.3 of the first gap
    mins, p10s, medians = [], [], []
    for k in ("fedavg/s0", "fedavg/s1"):
        v = sorted(_last_round_clients(tiny_runs[k], "loss"))
        assert len(v) == 4
        mins.append(v[0])
        p10s.append(v[0] + 0.3 * (v[1] - v[0]))
        medians.append((v[1] + v[2]) / 2)
    assert float(fedavg["client_min_mean"]) == pytest.approx(sum(mins) / 2)
    assert float(fedavg["client_p10_mean"]) == pytest.approx(sum(p10s) / 2)
    assert float(fedavg["client_median_mean"]) == pytest.approx(sum(medians) / 2)
    assert float(fedavg["client_median_sd"]) == pytest.approx(statistics.stdev(medians))

    # bytes from summary.json, seconds per round as the mean of rounds.jsonl's
    assert float(fedavg["up_mb_mean"]) == pytest.approx(sum(s["total_up_bytes"] for s in summaries) / 2 / 1e6)
    assert float(fedavg["down_mb_mean"]) == pytest.approx(sum(s["total_down_bytes"] for s in summaries) / 2 / 1e6)
    seconds = [
        statistics.fmean(
            json.loads(line)["seconds"] for line in (tiny_runs[k] / "rounds.jsonl").read_text().splitlines()
        )
        for k in ("fedavg/s0", "fedavg/s1")
    ]
    assert float(fedavg["round_seconds_mean"]) == pytest.approx(sum(seconds) / 2)
    assert fedavg["test_n"] == "0" and fedavg["epsilon"] == ""  # no `lightning-fed test`, no privacy

    fedprox = rows["method=DPOModule/FedProx, partition=default"]
    assert fedprox["runs"] == "1" and fedprox["final_sd"] == ""  # one seed: no spread
    md = (tmp_path / "report.md").read_text()
    assert f"| {final[0] / 2 + final[1] / 2:.3f} ± {statistics.stdev(final):.3f} |" in md
    # each client's final value, averaged over the two seeds (the last round's Parquet files)
    tables = [
        pq.read_table(sorted((tiny_runs[k] / "client_metrics/val").glob("*.parquet"))[-1]).to_pydict()
        for k in ("fedavg/s0", "fedavg/s1")
    ]
    per_client = {c: [] for c in range(4)}
    for t in tables:
        for c, v in zip(t["client"], t["loss"]):
            per_client[c].append(v)
    cell = ", ".join(f"c{c} {(v[0] + v[1]) / 2:.2f}" for c, v in per_client.items())
    fedavg_line = next(line for line in md.splitlines() if line.startswith("| method=DPOModule/FedAvg"))
    assert fedavg_line.endswith(f"| {cell} |") and "per client (mean over runs)" in md


def test_runs_with_other_data_get_their_own_table_and_the_reason(tiny_runs, tmp_path):
    assert report([str(p) for p in tiny_runs.values()] + ["--by", "method", "--out", str(tmp_path)]) == 0
    tables = {(r["table"], r["group"], r["runs"]) for r in _rows(tmp_path)}
    assert tables == {("1", "DPOModule/FedAvg", "2"), ("1", "DPOModule/FedProx", "1"), ("2", "DPOModule/FedAvg", "1")}
    md = (tmp_path / "report.md").read_text()
    why = (
        "different data from table 1: synthetic_args {'examples_per_client': 32, 'groups': ['positive']}"
        " (table 1: {'examples_per_client': 24, 'groups': ['positive']})"
    )
    assert md.count(why) == 1 and md.index(why) > md.index("## Table 2")


def test_by_a_dotted_config_key_and_epsilon_and_test_results_are_read(tiny_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_runs["fedavg/s0"], run)
    summary = json.loads((run / "summary.json").read_text())
    summary["hooks"] = {
        "HierarchicalDataSelection": {"privacy": {"max_epsilon": 2.5, "clients": {"0": {"epsilon": 1.5}}}}
    }
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "test_results.json").write_text(json.dumps({"metrics": {"pref_acc": 0.75}, "clients": {}}))
    loaded = load_run(run)
    assert loaded.epsilon() == 2.5 and loaded.field("federation.local_steps") == "2"
    assert report([str(run), "--by", "federation.local_steps", "--out", str(tmp_path / "out")]) == 0
    (row,) = _rows(tmp_path / "out")
    assert (row["group"], row["metric"], row["epsilon"], row["test_mean"]) == ("2", "pref_acc", "2.5", "0.75")


def test_a_run_without_round_0_gains_against_its_groups_round_0(tiny_runs, tmp_path):
    # seed 1 without its evaluation before round 1 (as real_text/run.py runs all seeds but one)
    run = tmp_path / "s1"
    shutil.copytree(tiny_runs["fedavg/s1"], run)
    summary = json.loads((run / "summary.json").read_text())
    summary["initial"] = None
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "client_metrics" / "val" / "round_000000.parquet").unlink()
    out = tmp_path / "out"
    assert report([str(tiny_runs["fedavg/s0"]), str(run), "--metric", "loss", "--out", str(out)]) == 0
    (row,) = _rows(out)
    s0 = json.loads((tiny_runs["fedavg/s0"] / "summary.json").read_text())
    base = s0["initial"]["val"]["loss"]
    gains = [base - s0["final"]["val"]["loss"], base - summary["final"]["val"]["loss"]]
    assert (row["initial_n"], row["gain_n"]) == ("1", "2")
    assert float(row["gain_mean"]) == pytest.approx(sum(gains) / 2)
    assert float(row["gain_sd"]) == pytest.approx(statistics.stdev(gains))
