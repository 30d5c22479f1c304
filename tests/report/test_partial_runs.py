"""``lightning-fed report`` on runs that did not end well, and on an ``--out`` it cannot write (issue 41 item 6).

Before: an emptied ``rounds.jsonl`` gave exit 0 with per-client columns from round 0 beside the
final column of the last round, and no warning; one interrupted run among a glob's matches
failed the whole report (exit 2); ``--out /proc/x`` or a path under a file failed without
naming ``--out``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.report.hand_runs import make_run

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)


def _report(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lightning_fed.cli", "report", *args]
    return subprocess.run(cmd, cwd=cwd, env=ENV, text=True, capture_output=True)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_an_emptied_rounds_file_is_read_from_the_summary_with_a_warning(tmp_path):
    run = make_run(tmp_path / "run", values=(0.25, 0.5, 1.0))
    summary = json.loads((run / "summary.json").read_text())
    summary["initial"]["val_clients"] = {str(c): {"pref_acc": 0.25} for c in range(4)}  # round 0 per client
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "rounds.jsonl").write_text("")
    before = _files(run)
    proc = _report([str(run), "--out", "out"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (
        f"warning: {run / 'rounds.jsonl'}: holds 0 of the 2 rounds summary.json records;"
        " the round figures are read from summary.json\n"
    )
    row = proc.stdout.splitlines()[3]
    # final, client min / p10 / median (the final evaluation's clients, not round 0's), round 0, gain, ...
    assert row.startswith(
        "| method=DPOModule/FedAvg, partition=default | 1 | 0 | pref_acc"
        " | 1.000 | 1.000 | 1.000 | 1.000 | 0.250 | 0.750 |"
    )
    # seconds per round: from the summary's rounds; per client: the final evaluation's
    assert row.endswith("| 2.00 | c0 1.00, c1 1.00, c2 1.00, c3 1.00 |"), row
    assert _files(run) == before


def test_an_interrupted_run_among_a_globs_matches_is_left_out_with_a_warning(tmp_path):
    runs = tmp_path / "runs"
    make_run(runs / "a")
    make_run(runs / "b", seed=1)
    (runs / "killed" / "checkpoints").mkdir(parents=True)  # killed before it wrote summary.json
    (runs / "killed" / "checkpoints" / "last.ckpt").write_bytes(b"\0")
    cut = make_run(runs / "cut", seed=2)
    (cut / "rounds.jsonl").write_text('{"round": 1, "seconds": 1.0}\n{"round": 2, "secon')
    unevaluated = make_run(runs / "unevaluated", seed=3)
    summary = json.loads((unevaluated / "summary.json").read_text())
    summary["final"] = None  # stopped before any round was evaluated
    (unevaluated / "summary.json").write_text(json.dumps(summary))
    before = _files(runs)
    proc = _report([str(runs / "*"), "--out", "out"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"warning: {runs / 'killed'}: no summary.json in it or below it (not a finished run): left out",
        f"warning: {cut / 'rounds.jsonl'}: line 2 is not JSON (a truncated or damaged file): left out",
        f"warning: {unevaluated / 'summary.json'}: no final evaluation (interrupted before a round was evaluated?):"
        " left out",
    ]
    assert proc.stdout.startswith("## Table 1: 2 runs, pref_acc\n")
    assert f"- {runs / 'killed'}: no summary.json" in (tmp_path / "out" / "report.md").read_text()
    assert _files(runs) == before


def test_a_glob_whose_every_run_is_left_out_says_why_for_each(tmp_path):
    """Issue 41 (LOW): on 08c1cba only ``error: RUN runs/*: no finished run to report (2 left out)``,
    no run's reason. Now each run's ``warning:`` line, then the error: exit 2, nothing written."""
    runs = tmp_path / "runs"
    (runs / "killed").mkdir(parents=True)  # killed before it wrote summary.json
    cut = make_run(runs / "cut")
    (cut / "rounds.jsonl").write_text('{"round": 1, "secon')
    before = _files(runs)
    proc = _report([str(runs / "*"), "--out", "out"], cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [
        f"warning: {runs / 'killed'}: no summary.json in it or below it (not a finished run): left out",
        f"warning: {cut / 'rounds.jsonl'}: line 1 is not JSON (a truncated or damaged file): left out",
        f"error: RUN {runs / '*'}: no finished run to report (2 left out)",
    ]
    assert not (tmp_path / "out").exists()
    assert _files(runs) == before


def test_a_run_named_on_its_own_is_still_refused(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "rounds.jsonl").write_text('{"round": 1, "secon')
    proc = _report([str(run), "--out", "out"], cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"error: {run / 'rounds.jsonl'}: line 1 is not JSON (a truncated or damaged file)\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
def test_an_out_that_cannot_be_written_is_named(tmp_path, where):
    run = make_run(tmp_path / "run")
    (tmp_path / "file").write_text("")
    out, why = {
        "under_a_file": (str(tmp_path / "file" / "sub"), f"{str(tmp_path / 'file')!r} is a file, not a folder"),
        "proc": ("/proc/x", "cannot write into '/proc' ("),
    }[where]
    before = _files(tmp_path)
    proc = _report([str(run), "--out", out], cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"error: --out {out!r}: {why}"), proc.stderr
    assert proc.stderr.splitlines()[1:] == []
    assert _files(tmp_path) == before


def _private(run: Path, report_validation: bool) -> Path:
    """``run`` made a private run's: validation withheld (no final evaluation) unless ``report_validation``."""
    summary = json.loads((run / "summary.json").read_text())
    summary["config"]["federation"]["privacy"] = {"target_epsilon": 4.0, "report_validation": report_validation}
    summary["privacy"] = {"enabled": True, "epsilon": {"client": 3.99}}
    if not report_validation:
        summary["initial"] = None
        summary["final"] = None
        for r in summary["rounds"]:
            r.pop("val")
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_a_finished_private_run_is_not_called_interrupted(tmp_path):
    """Red team 12 row 14: a finished ClientLevelDP run (validation withheld by default) was left out
    of a glob's report as "interrupted before a round was evaluated?", and named on its own got "was
    the run evaluated?"; both now say the validation was withheld and which option reports it."""
    runs = tmp_path / "runs"
    make_run(runs / "a")
    private = _private(make_run(runs / "dp", seed=1), report_validation=False)
    reason = (
        "no final evaluation: a private run withholds its validation"
        " (federation.privacy.report_validation: true reports the means over clients)"
    )
    proc = _report([str(runs / "*"), "--out", "out"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [f"warning: {private / 'summary.json'}: {reason}: left out"]
    alone = _report([str(private), "--out", "out2"], cwd=tmp_path)
    assert (alone.returncode, alone.stdout) == (2, "")
    assert alone.stderr == f"error: {private / 'summary.json'}: {reason}\n"
    assert not (tmp_path / "out2").exists()


def test_a_private_run_that_reports_its_validation_is_reported(tmp_path):
    """The control: with ``report_validation: true`` the private run's means are in the table."""
    private = _private(make_run(tmp_path / "dp"), report_validation=True)
    proc = _report([str(private), "--out", "out"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("## Table 1: 1 run, pref_acc\n")
