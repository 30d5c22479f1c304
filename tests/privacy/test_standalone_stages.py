"""A standalone ``lightning-fed test`` of a private run writes nothing of the clients' test data, or with
``report_validation`` the means over the clients only. Each is a fit, then a ``test``
subprocess: about 12 s on an idle 2-core machine."""

import json
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


def _fit_then_test(tmp_path, report_validation: bool) -> subprocess.CompletedProcess:
    """fit a private run (1 round, a synthetic test set) in process, then ``lightning-fed test`` of
    its checkpoint as a subprocess with ``trainer.default_root_dir`` ``tmp_path / "test"``: ``test``
    writes into the run folder it evaluates (its TensorBoard events beside fit's), nothing there
    (``_test_tags`` reads the events files the ``test`` made)."""
    cfg = yaml.safe_load(open(_private_config(tmp_path)).read())
    cfg["data"]["init_args"]["test_dataset"] = "synthetic:preferences"
    cfg["federation"]["privacy"]["report_validation"] = report_validation
    config = tmp_path / "private_test.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run_in_process(str(config), tmp_path / "run", ["--trainer.enable_checkpointing=true", "--federation.rounds=1"])
    (ckpt,) = list((tmp_path / "run").rglob("last.ckpt"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "lightning_fed.cli", "test", "--config", str(config), "--ckpt_path", str(ckpt)]
    cmd += [f"--trainer.default_root_dir={tmp_path / 'test'}", "--trainer.enable_progress_bar=false"]
    (tmp_path / "fit_events.txt").write_text("\n".join(str(e) for e in tmp_path.rglob("events.out.tfevents*")))
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert not (tmp_path / "test").exists()  # nothing under another default_root_dir
    return proc


def _test_tags(tmp_path) -> set[str]:
    """The scalar tags of the TensorBoard events files the ``test`` subprocess wrote (fit's left out)."""
    fit = set((tmp_path / "fit_events.txt").read_text().splitlines())
    tags = set()
    for event in tmp_path.rglob("events.out.tfevents*"):
        if str(event) not in fit:
            tags |= _scalar_tags_of(event)
    return tags


def _scalar_tags_of(event) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(event))  # this file alone, not its folder's others
    accumulator.Reload()
    return set(accumulator.Tags()["scalars"]) - {"hp_metric", "epoch"}  # Lightning's own


def test_test_of_a_private_run_writes_nothing_of_the_clients_test_data(tmp_path):
    """fit (1 round, DP on, a synthetic test set), then ``lightning-fed test`` as a subprocess: exit 0,
    only the warning on stderr, no ``test_results.json``, no ``test/`` scalar in any TensorBoard event."""
    proc = _fit_then_test(tmp_path, report_validation=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == WARNING  # exactly the one line
    assert not list(tmp_path.rglob("test_results.json"))
    assert _test_tags(tmp_path) == set()
    assert "test/" not in proc.stdout + proc.stderr  # no results table either


def test_test_of_a_private_run_with_report_validation_writes_only_the_means(tmp_path):
    """As above with ``report_validation: true``: exit 0; ``test_results.json`` holds the overall
    means and no client, group or distribution over clients; TensorBoard has only ``test/<m>``."""
    proc = _fit_then_test(tmp_path, report_validation=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = list(tmp_path.rglob("test_results.json"))
    results = json.loads(path.read_text())
    assert results["clients"] == {} and results["groups"] == {}
    assert "pref_acc" in results["metrics"] and not [k for k in results["metrics"] if "_client_" in k]
    tags = _test_tags(tmp_path)
    assert tags and all(t.startswith("test/") and "_client" not in t for t in tags), sorted(tags)
