"""A SIGTERM once a run has completed, or once its outcome is being reported, does not change its exit
status (issue 41): the run's own line and status stand.

Each case sends the signal at a chosen point, without timing: inside a function
(tests/helpers/signal_driver.py), or from an ``atexit`` function a ``sitecustomize`` registers
first, so it runs last, while the process ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "helpers" / "signal_driver.py"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
for _name in ("LIGHTNING_FED_DEBUG", "LIGHTNING_FED_VERBOSE"):
    ENV.pop(_name, None)
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--federation.local_steps=1"]
AT_EXIT = """
import atexit, os, signal, time

def _sigterm_while_ending():
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + 0.5  # a Python handler runs between these bytecodes
    while time.monotonic() < deadline:
        pass

atexit.register(_sigterm_while_ending)  # registered first: runs last
"""


def _fit_args(root: Path, *extra: str) -> list[str]:
    return ["fit", "--config", "configs/tiny.yaml", f"--trainer.default_root_dir={root}", *QUIET, *extra]


def _closing_line(stdout: str) -> str:
    return [line for line in stdout.splitlines() if line.startswith("run folder:")][-1]


def test_a_sigterm_while_a_completed_run_ends_keeps_exit_0(tmp_path):
    """After the closing line the process ended by startup's guard, restored when the fit was over:
    'stopped by SIGTERM; no round completed in this run, ...', exit 143 (and once Python's shutdown
    had reset the handler, by the signal itself: no line, 143 in a shell)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(AT_EXIT)
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", *_fit_args(run, "--federation.rounds=1")],
        cwd=ROOT,
        env={**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _closing_line(proc.stdout).startswith(f"run folder: {run / 'lightning_logs' / 'version_0'};")
    assert "stopped by" not in proc.stderr, proc.stderr[-3000:]


def test_a_sigterm_after_the_last_round_is_written_keeps_exit_0_and_the_summary(tmp_path):
    """SIGTERM after Lightning has put its handler away (fit's on_fit_end), the run's files written:
    on 08c1cba the exception stopped the completed run, summary.json was rewritten as stopped
    ('Terminated: 15' in round 2 of 1) and the process exited 143."""
    run = tmp_path / "run"
    target = "lightning_fed.callbacks.federated_loop:FederatedLoop.on_fit_end"
    proc = subprocess.run(
        [sys.executable, str(DRIVER), target, "--", *_fit_args(run, "--federation.rounds=1")],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _closing_line(proc.stdout).startswith(f"run folder: {run / 'lightning_logs' / 'version_0'};")
    summary = json.loads((run / "lightning_logs" / "version_0" / "summary.json").read_text())
    assert "stopped" not in summary and [r["round"] for r in summary["rounds"]] == [1]


def test_a_sigterm_while_a_failure_is_reported_keeps_its_line(tmp_path):
    """On 08c1cba the handler raised inside the failure's report: a traceback ending in
    'lightning_fed.errors.Terminated: 15' instead of the error line."""
    # lr=10 (the bound): every update is beyond the norm bound, round 1 fails (tests/test_cli_process.py)
    failing = ["--model.init_args.lr=10", "--federation.max_update_norm=1", "--federation.rounds=1"]
    proc = subprocess.run(
        [sys.executable, str(DRIVER), "lightning_fed.cli:_outcome", "--", *_fit_args(tmp_path / "run", *failing)],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "min_clients" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "stopped by" not in proc.stderr
