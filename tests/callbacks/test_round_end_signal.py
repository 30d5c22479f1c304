"""A SIGTERM between a round's record (``rounds.jsonl``) and its checkpoint (red team 16 B08).

The round is recorded at its last batch and saved at the epoch's end, after its evaluation; Lightning
stopped after the first evaluation batch, so the round stayed recorded with no checkpoint, and a
first round's stop line said no round had completed: nothing could be resumed. The signal is sent
as the round's record is written (tests/helpers/signal_driver.py), so it lands in that window.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from tests.helpers.tiny_run import ARGS, CHECKPOINT, ENV, ROOT, tiny_run

DRIVER = ROOT / "tests" / "helpers" / "signal_driver.py"
RECORD = "lightning_fed.federation.round_history:RoundHistory._persist"
"""Appends a round's line to ``rounds.jsonl``: its first call records round 1."""


def _fit(root: Path, *extra: str, driver: bool = False) -> subprocess.CompletedProcess:
    args = ["fit", "--config", "configs/tiny.yaml", f"--trainer.default_root_dir={root}", *ARGS, *extra]
    cmd = (
        [sys.executable, str(DRIVER), RECORD, "--", *args]
        if driver
        else [sys.executable, "-m", "lightning_fed.cli", *args]
    )
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)  # no time-out: CI is slow


def _global_state(checkpoint: Path) -> dict[str, torch.Tensor]:
    return torch.load(checkpoint, weights_only=True)["federation"]["global_state"]


def test_a_sigterm_after_a_rounds_record_saves_that_round_and_names_its_checkpoint(tmp_path, tmp_path_factory):
    """On f6ad729: exit 143, 'stopped by SIGTERM; no round completed in this run, so no checkpoint was
    written by it', rounds.jsonl and summary.json holding round 1 and no checkpoints/ folder."""
    proc = _fit(tmp_path, "--federation.rounds=2", driver=True)
    run = tmp_path / "lightning_logs" / "version_0"
    last = run / "checkpoints" / "last.ckpt"
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1] == (
        f"lightning-fed: stopped by SIGTERM; the last complete round is in {last}; resume with --ckpt_path {last}"
    )
    # the record, the summary and the checkpoint say one thing: round 1, evaluated, saved
    lines = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    summary = json.loads((run / "summary.json").read_text())
    assert [r["round"] for r in lines] == [r["round"] for r in summary["rounds"]] == [1]
    assert "val" in lines[0]
    assert torch.load(last, weights_only=True)["federation"]["report"]["rounds"] == 1
    # round 1 as an uninterrupted run ends it, and the folder goes on from there
    uninterrupted = _global_state(tiny_run(tmp_path_factory) / CHECKPOINT)
    saved = _global_state(last)
    assert saved.keys() == uninterrupted.keys()
    assert all(torch.equal(saved[k], uninterrupted[k]) for k in saved)
    resumed = _fit(tmp_path, "--federation.rounds=2", f"--ckpt_path={last}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    lines = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in lines] == [1, 2]
