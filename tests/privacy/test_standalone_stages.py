"""A standalone ``lightning-fed test`` of a private run writes nothing of the clients' test data."""

import os
import subprocess
import sys

import yaml

from tests.helpers.flower_sim import ROOT, run_in_process
from tests.privacy.test_in_run import _private_config

WARNING = (
    "warning: test: with differential privacy on, nothing computed on the clients' test data is written"
    " (federation.privacy.report_validation: true opts in, unprotected); nothing written\n"
)


def test_test_of_a_private_run_writes_nothing_of_the_clients_test_data(tmp_path):
    """fit (1 round, DP on, a synthetic test set), then ``lightning-fed test`` as a subprocess: exit 0,
    only the warning on stderr, no ``test_results.json``, no ``test/`` scalar in any TensorBoard event."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = yaml.safe_load(open(_private_config(tmp_path)).read())
    cfg["data"]["init_args"]["test_dataset"] = "synthetic:preferences"
    config = tmp_path / "private_test.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run_in_process(str(config), tmp_path / "run", ["--trainer.enable_checkpointing=true", "--federation.rounds=1"])
    (ckpt,) = list((tmp_path / "run").rglob("last.ckpt"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "lightning_fed.cli", "test", "--config", str(config), "--ckpt_path", str(ckpt)]
    cmd += [f"--trainer.default_root_dir={tmp_path / 'test'}", "--trainer.enable_progress_bar=false"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == WARNING  # exactly the one line
    assert not list(tmp_path.rglob("test_results.json"))
    events = list((tmp_path / "test").rglob("events.out.tfevents*"))
    for path in events:
        accumulator = EventAccumulator(str(path.parent))
        accumulator.Reload()
        assert set(accumulator.Tags()["scalars"]) <= {"hp_metric"}, path  # Lightning's placeholder (-1)
    assert "test/" not in proc.stdout + proc.stderr  # no results table either
