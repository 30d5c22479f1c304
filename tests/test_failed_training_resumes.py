"""A run that fails during training (exit 1) keeps what earlier runs wrote and resumes from its last
checkpoint to completion, as a process (issue 41: "a run that fails never deletes or rewrites a
file an earlier run wrote"; the exit-1 case, beside the exit-2 refusals of
tests/test_failed_run_keeps_files.py).

The failure is a user's own callback, named in the config (``trainer.callbacks``), that raises in a
given round: what a bug in a user's code does mid-run. The package reports it as exit 1, one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.files import snapshot

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["--trainer.enable_progress_bar=false", "--federation.local_steps=1"]

CALLBACK = '''
import lightning.pytorch as pl


class FailInRound(pl.Callback):
    """Raises when the loop starts round ``round`` (1-based)."""

    def __init__(self, round: int) -> None:
        self.round = round

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch + 1 == self.round:
            raise RuntimeError(f"injected failure in round {self.round}")
'''


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """The environment of a user whose own module ``fail_round`` is importable."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "fail_round.py").write_text(CALLBACK)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(site)])
    env.pop("LIGHTNING_FED_DEBUG", None)
    return env


def _fit(env: dict[str, str], root: Path, *extra: str, fail_in: int | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", "configs/tiny.yaml"]
    cmd += [f"--trainer.default_root_dir={root}", *QUIET, *extra]
    if fail_in is not None:
        cmd.append(f"--trainer.callbacks=[{{class_path: fail_round.FailInRound, init_args: {{round: {fail_in}}}}}]")
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)  # no time-out: a busy CPU is slow


def _errors(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def _assert_kept(before: dict[Path, bytes], folder: Path) -> None:
    """Every file of ``before`` is in ``folder`` with its bytes. The one file a resumed run may add
    before its first round ends is TensorBoard's new event file (a resumed TensorBoard run writes
    its own file beside the earlier ones, never into them)."""
    after = snapshot(folder)
    assert [str(p) for p in before if p not in after] == []
    assert [str(p) for p in before if p in after and after[p] != before[p]] == []
    assert [p.name for p in after.keys() - before.keys() if not p.name.startswith("events.out.tfevents.")] == []


def _rounds(run: Path) -> list[int]:
    return [json.loads(line)["round"] for line in (run / "rounds.jsonl").read_text().splitlines()]


def test_a_run_that_fails_in_training_keeps_earlier_files_and_resumes_to_completion(tmp_path, env):
    root = tmp_path / "root"
    run = root / "lightning_logs" / "version_0"
    last = run / "checkpoints" / "last.ckpt"
    first = _fit(env, root, "--federation.rounds=1")
    assert first.returncode == 0, first.stderr[-3000:]

    # Fails in its first round (round 2): no round completed, so every file is the earlier run's.
    before = snapshot(root)
    failed = _fit(env, root, "--federation.rounds=3", f"--ckpt_path={last}", fail_in=2)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert _errors(failed) == ["error: RuntimeError: injected failure in round 2"]
    _assert_kept(before, root)

    # Fails in round 3, after completing round 2: the records are this run's, up to round 2.
    failed = _fit(env, root, "--federation.rounds=3", f"--ckpt_path={last}", fail_in=3)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert _errors(failed) == ["error: RuntimeError: injected failure in round 3"]
    assert _rounds(run) == [1, 2]

    # Resumed from the last checkpoint (round 2's), without the failing callback: to completion.
    done = _fit(env, root, "--federation.rounds=3", f"--ckpt_path={last}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _rounds(run) == [1, 2, 3]
    summary = json.loads((run / "summary.json").read_text())
    assert [r["round"] for r in summary["rounds"]] == [1, 2, 3]
    assert [p.name for p in (root / "lightning_logs").iterdir()] == ["version_0"]
