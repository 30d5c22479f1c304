"""A handful of generated checkpoints through ``lightning-fed fit --ckpt_path`` as a process
(issue 22): exit 0 or exit 2 with one ``error:`` line, never exit 1, and a refused checkpoint
writes nothing. The in-process tests (test_state_files.py) cover the space; these show that
what they accept the process really resumes from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.tiny_run import CHECKPOINT, tiny_run

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)
ARGS = ["--trainer.enable_progress_bar=false", "--federation.local_steps=1", "--trainer.logger=false"]
FIELDS = ["epoch", "global_step", "loops", "optimizer_states", "lr_schedulers", "callbacks", "state_dict", "federation"]
REPLACEMENTS = [None, -1, "x", [], {}, 10**9, torch.zeros(3)]


def _fit(root: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", "configs/tiny.yaml"]
    cmd += [f"--trainer.default_root_dir={root}", *ARGS, *extra]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """One round of configs/tiny.yaml (trained once per session; resumed here without a logger, an allowed change)."""
    return torch.load(tiny_run(tmp_path_factory) / CHECKPOINT, weights_only=True)


@settings(max_examples=3) if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci" else (lambda f: f)
@given(field=st.sampled_from(FIELDS), value=st.sampled_from(REPLACEMENTS))
def test_a_mutated_checkpoint_resumes_or_is_refused_before_writing(tmp_path_factory, trained, field, value):
    folder = tmp_path_factory.mktemp("mutated")
    path = folder / "last.ckpt"
    torch.save({**trained, field: value}, path)
    root = folder / "run"
    proc = _fit(root, "--federation.rounds=2", f"--ckpt_path={path}")
    assert proc.returncode in (0, 2), (field, value, proc.stderr[-3000:])
    if proc.returncode == 2:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and str(path) in errors[0], (field, value, proc.stderr[-3000:])
        assert not root.exists(), (field, value)
