"""What a ``fit`` leaves for its user: the closing line, and the documented TensorBoard scalars.

One ``lightning-fed fit --config tiny`` as a process (3 rounds x 2 clients x 5 local steps = 30
optimizer steps, fewer than Lightning's default ``log_every_n_steps`` of 50).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from lightning_fed.federated_cli import closing_line
from tests.helpers.cli import lightning_fed

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
for name in ("LIGHTNING_FED_DEBUG", "LIGHTNING_FED_VERBOSE"):
    ENV.pop(name, None)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    proc = lightning_fed("fit", "--config", "tiny", f"--trainer.default_root_dir={root}", cwd=root, env=ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, root / "lightning_logs" / "version_0"


def test_fit_closes_with_what_the_run_learned_since_the_evaluation_before_training(tiny_run):
    """Issue 41 item 10: the line starts at round 0 (the evaluation before round 1), not at round 1,
    where ``tiny``'s pref_acc is already 1.000, and shows reward_acc and the loss too."""
    proc, run_dir = tiny_run
    summary = json.loads((run_dir / "summary.json").read_text())
    start, end = summary["initial"]["val"], summary["rounds"][-1]["val"]
    shown = ", ".join(f"{m} {start[m]:.3f} -> {end[m]:.3f}" for m in ("pref_acc", "reward_acc", "loss"))
    expected = f"run folder: {run_dir}; {shown} (round 0 -> round 3)"
    assert proc.stdout.splitlines()[-1] == expected  # after the progress bar, on stdout as the results of `evaluate`
    assert expected not in proc.stderr
    assert start["pref_acc"] < 0.5 < end["pref_acc"] and end["loss"] < start["loss"]  # the line shows learning


def test_a_small_run_has_the_documented_train_scalars(tiny_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, run_dir = tiny_run
    (events,) = run_dir.glob("events.out.tfevents.*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    tags = accumulator.Tags()["scalars"]
    assert {"train/loss", "train/reward_acc"} <= set(tags), tags  # docs/get-started/outputs.md
    # once per turn (log_every_n_steps = local_steps = 5): a client's, or a batched group's (K clients in
    # one step): 3 rounds x 2 clients x 5 steps / K; the K `auto` chose is recorded in config.yaml
    k = yaml.safe_load((run_dir / "config.yaml").read_text())["federation"]["batch_clients"]
    k = 1 if k in ("off", None, False) else int(k)
    assert [e.step for e in accumulator.Scalars("train/loss")] == list(range(4, 30 // k, 5))


def test_the_closing_line_of_a_run_without_validation(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"rounds": [{"round": 1}, {"round": 2}]}))
    assert closing_line(tmp_path) == (
        f"run folder: {tmp_path}; no validation metrics (no validation data or no evaluated round)"
    )
    rounds = [{"round": 1, "val": {"loss": 2.0}}, {"round": 2}, {"round": 3, "val": {"loss": 1.5, "token_acc": 0.25}}]
    (tmp_path / "summary.json").write_text(json.dumps({"rounds": rounds}))
    # the first of report's default metrics the last round has, from the first evaluation that has it
    assert closing_line(tmp_path) == f"run folder: {tmp_path}; token_acc 0.250, loss 1.500 (round 3)"
    (tmp_path / "summary.json").write_text(json.dumps({"rounds": rounds[:2]}))
    assert closing_line(tmp_path) == f"run folder: {tmp_path}; loss 2.000 (round 1)"


def test_the_closing_line_starts_before_training_and_shows_the_loss_when_the_headline_stays(tmp_path):
    """An own-data run: pref_acc 0 before and after (the chosen answers are the longer ones), while
    the DPO reward accuracy and the loss show the learning (issue 41 item 10)."""
    initial = {"round": 0, "val": {"pref_acc": 0.0, "reward_acc": 0.5, "loss": 0.693}}
    rounds = [{"round": r, "val": {"pref_acc": 0.0, "reward_acc": 1.0, "loss": 0.059}} for r in (1, 2, 3)]
    (tmp_path / "summary.json").write_text(json.dumps({"initial": initial, "rounds": rounds}))
    assert closing_line(tmp_path) == (
        f"run folder: {tmp_path}; pref_acc 0.000 -> 0.000, reward_acc 0.500 -> 1.000, loss 0.693 -> 0.059"
        " (round 0 -> round 3)"
    )
