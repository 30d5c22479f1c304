"""One round of ``configs/tiny.yaml`` per pytest session, shared by the checkpoint tests.

Each of tests/test_failed_run_keeps_files.py, tests/test_checkpoint_boundary.py and
tests/boundary/test_resume_process.py trained the same run in a module fixture of its own (a
minute of CPU each under CI load); :func:`tiny_run` trains it once per session. The folder is
shared: a test copies it (or writes its changed checkpoint elsewhere) and never writes into it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)
ARGS = ("--trainer.enable_progress_bar=false", "--federation.local_steps=1", "--federation.rounds=1")
CHECKPOINT = Path("lightning_logs", "version_0", "checkpoints", "last.ckpt")
"""Where the run's checkpoint is, under the folder :func:`tiny_run` returns."""

_RUNS: dict[int, Path] = {}


def tiny_run(tmp_path_factory) -> Path:
    """The ``trainer.default_root_dir`` of one round of one local step of ``configs/tiny.yaml``,
    trained on the first call of the session (``tmp_path_factory`` is pytest's, session-scoped)."""
    key = id(tmp_path_factory)
    if key not in _RUNS:
        root = tmp_path_factory.mktemp("tiny_run")
        cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", "configs/tiny.yaml"]
        cmd += [f"--trainer.default_root_dir={root}", *ARGS]
        proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)  # no time-out: CI is slow
        assert proc.returncode == 0, proc.stderr[-3000:]
        _RUNS[key] = root
    return _RUNS[key]
