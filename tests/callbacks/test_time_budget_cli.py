"""``trainer.max_time`` stops a federated run after a round and says so (seventh outside run).

On a8debca tiny with ``trainer.max_time: "00:00:00:01"`` and ``federation.rounds: 2`` ended after
round 1, exit 0, ``summary.json`` without ``stopped``, the closing line ``(round 0 -> round 1)``
as if the run had finished. A wall-clock budget is a legitimate option, so it is kept: checked
after each round (``lightning_fed/callbacks/time_budget.py``), the stop is ``summary.json``'s
``stopped`` and the closing line's end. The budget here, one microsecond, has always run out by the
end of round 1 and never at the fit's start (the Timer's training clock starts at 0 there), so the
test does not depend on how fast the machine is. A budget of 0 is refused
(``tests/test_loop_conflicts_cli.py``).
"""

from __future__ import annotations

import json

from tests.helpers.cli import lightning_fed

SMALL = """\
federation:
  rounds: 2
  local_steps: 1
data:
  init_args:
    synthetic_args: {examples_per_client: 8, groups: [positive]}
trainer:
  max_time: {microseconds: 1}
  enable_progress_bar: false
"""


def test_a_run_max_time_stopped_records_and_says_after_which_round(tmp_path):
    (tmp_path / "run.yaml").write_text(SMALL)
    proc = lightning_fed("fit", "--config", "tiny", "--config", "run.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "runs" / "tiny" / "lightning_logs" / "version_0"
    summary = json.loads((run / "summary.json").read_text())
    reason = "trainer.max_time (1e-06 s) reached"
    assert summary["stopped"] == {"reason": reason, "after_round": 1, "rounds": 2}
    assert [r["round"] for r in summary["rounds"]] == [1]
    assert proc.stdout.splitlines()[-1].endswith(f"(round 0 -> round 1); stopped after round 1 of 2: {reason}")
    assert f"warning: stopping: {reason} after round 1 of 2" in proc.stderr.splitlines()
    assert (run / "checkpoints" / "last.ckpt").is_file()  # round 1, complete: resumable


def test_a_resume_whose_max_time_is_spent_says_so_and_keeps_the_summary(tmp_path):
    """On 52f9c49 such a resume (Lightning's Timer stops it before a round starts) ended with exit 0 and
    no warning; the closing line told the earlier run's end. It says the budget's stop as a run stopped
    after a round does, and rewrites no file of the run it resumed (summary.json byte for byte)."""
    (tmp_path / "run.yaml").write_text(SMALL)
    first = lightning_fed("fit", "--config", "tiny", "--config", "run.yaml", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "runs" / "tiny" / "lightning_logs" / "version_0"
    before = (run / "summary.json").read_bytes()
    ckpt = str(run / "checkpoints" / "last.ckpt")
    proc = lightning_fed(
        "fit", "--config", "tiny", "--config", "run.yaml", "--federation.rounds=3", "--ckpt_path", ckpt, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    reason = "trainer.max_time (1e-06 s) reached"
    assert f"warning: stopping: {reason} after round 1 of 3" in proc.stderr.splitlines()
    assert proc.stdout.splitlines()[-1].endswith(f"(round 0 -> round 1); stopped after round 1 of 3: {reason}")
    assert (run / "summary.json").read_bytes() == before
