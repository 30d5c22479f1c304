"""Run folders read back: where runs are found, what a summary without its config falls back to."""

from __future__ import annotations

import json
import shutil

import pytest

from lightning_fed.errors import UserError
from lightning_fed.report.runs import config_value, find_runs, load_run


def test_runs_are_found_below_a_folder_and_once_each(tiny_runs):
    root = tiny_runs["fedavg/s0"].parents[2]  # .../fedavg: s0 and s1 below it
    found = find_runs([str(root), str(tiny_runs["fedavg/s0"] / "summary.json")])
    assert [r.path for r in found] == [tiny_runs["fedavg/s0"].resolve(), tiny_runs["fedavg/s1"].resolve()]
    assert [r.seed for r in found] == [0, 1]


def test_a_summary_without_its_config_reads_the_run_folders_config_yaml(tiny_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(tiny_runs["fedprox/s0"], run)
    summary = json.loads((run / "summary.json").read_text())
    summary["config"] = None  # as a Flower server writes it
    (run / "summary.json").write_text(json.dumps(summary))
    assert load_run(run).method == "DPOModule/FedProx"
    (run / "config.yaml").unlink()
    assert load_run(run).method == "-/-"
    (run / "summary.json").write_text(json.dumps({"final": None}))
    with pytest.raises(UserError, match=r"summary.json: not a lightning-fed summary \(no rounds\)"):
        load_run(run)


def test_dotted_keys_may_leave_out_init_args():
    config = {"federation": {"strategy": {"class_path": "x.FedAvg", "init_args": {"server_lr": 0.5}}}}
    assert config_value(config, "federation.strategy.server_lr") == 0.5
    assert config_value(config, "federation.strategy.init_args.server_lr") == 0.5
    with pytest.raises(KeyError):
        config_value(config, "federation.rounds")
