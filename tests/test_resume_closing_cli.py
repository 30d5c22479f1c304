"""The closing line of a resume that trains no round names the checkpoint's round, not the folder's newer run.

Seventh outside run (REPORT row 31, still so on a8debca): a round-1 checkpoint of a run since taken
to round 2 in the same folder, resumed with ``--federation.rounds=1``, trains nothing (exit 0, as a
requeued job resuming a finished run should) and leaves the folder's files as they were; its
closing line read that folder's ``summary.json`` and said ``(round 0 -> round 2)``, the newer run's
result, as if this one had produced it.
"""

from __future__ import annotations

import shutil

from tests.helpers.cli import lightning_fed

SMALL = """\
federation:
  local_steps: 1
data:
  init_args:
    synthetic_args: {examples_per_client: 8, groups: [positive]}
trainer:
  enable_progress_bar: false
"""


def test_resuming_an_older_checkpoint_that_trains_nothing_says_so(tmp_path):
    (tmp_path / "run.yaml").write_text(SMALL)
    fit = ("fit", "--config", "tiny", "--config", "run.yaml")
    checkpoints = tmp_path / "runs" / "tiny" / "lightning_logs" / "version_0" / "checkpoints"
    first = lightning_fed(*fit, "--federation.rounds=1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.copy(checkpoints / "last.ckpt", checkpoints / "r1.ckpt")
    longer = lightning_fed(*fit, "--federation.rounds=2", f"--ckpt_path={checkpoints / 'last.ckpt'}", cwd=tmp_path)
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert longer.stdout.splitlines()[-1].endswith("(round 0 -> round 2)")
    again = lightning_fed(*fit, "--federation.rounds=1", f"--ckpt_path={checkpoints / 'r1.ckpt'}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.splitlines()[-1] == (
        "run folder: runs/tiny/lightning_logs/version_0; no round trained: the checkpoint resumed had completed"
        " round 1 (the folder's summary.json is of a later run of it, round 2)"
    )
