"""A standalone ``validate``/``test`` of a private run that opted into ``report_validation``
writes the means over the clients only, as the rounds' evaluations do."""

import json
import os
import subprocess
import sys

import yaml

from lightning_fed.callbacks.evaluation_stage import means_only
from tests.helpers.flower_sim import ROOT, run_in_process
from tests.privacy.test_in_run import _private_config


def test_means_only_keeps_the_overall_means_and_the_data_totals():
    results = {
        "stage": "test",
        "num_examples": 6,
        "metrics": {"loss": 0.5, "loss_client_min": 0.2, "loss_client_p50": 0.5, "loss_client_max": 0.9},
        "clients": {"0": {"loss": 0.2, "num_examples": 2}, "1": {"loss": 0.65, "num_examples": 4}},
        "groups": {"positive": {"loss": 0.2, "num_examples": 2}},
        "data": {"truncated": [1, 0, 3], "dataset": "synthetic:preferences"},
    }
    assert means_only(results) == {
        "stage": "test",
        "num_examples": 6,
        "metrics": {"loss": 0.5},
        "clients": {},
        "groups": {},
        "data": {"truncated": 4, "dataset": "synthetic:preferences"},
    }


def test_test_of_a_private_run_with_report_validation_writes_only_the_means(tmp_path):
    """fit (1 round, client-level DP, ``report_validation: true``, a synthetic test set with groups),
    then ``lightning-fed test`` as a subprocess: exit 0; ``test_results.json`` holds the overall
    means and no client, group or distribution over clients; TensorBoard has only ``test/<m>``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = yaml.safe_load(open(_private_config(tmp_path)).read())
    cfg["data"]["init_args"]["test_dataset"] = "synthetic:preferences"
    cfg["federation"]["privacy"]["report_validation"] = True
    config = tmp_path / "private_test.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run_in_process(str(config), tmp_path / "run", ["--trainer.enable_checkpointing=true", "--federation.rounds=1"])
    (ckpt,) = list((tmp_path / "run").rglob("last.ckpt"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "lightning_fed.cli", "test", "--config", str(config), "--ckpt_path", str(ckpt)]
    cmd += [f"--trainer.default_root_dir={tmp_path / 'test'}", "--trainer.enable_progress_bar=false"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = list(tmp_path.rglob("test_results.json"))
    results = json.loads(path.read_text())
    assert results["clients"] == {} and results["groups"] == {}
    assert results["metrics"] and not [k for k in results["metrics"] if "_client_" in k]
    assert "pref_acc" in results["metrics"]
    tags = set()
    for event in (tmp_path / "test").rglob("events.out.tfevents*"):
        accumulator = EventAccumulator(str(event.parent))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["scalars"])
    test_tags = tags - {"hp_metric", "epoch"}  # Lightning's own
    assert test_tags and all(t.startswith("test/") and "_client" not in t for t in test_tags), sorted(test_tags)
