"""A resume (or a ``validate``) stopped by SIGTERM leaves a run folder copied without its ``.lock`` as it was
(red team 15 L6): on acbacbd one stopped while it imported Lightning, after the precheck had locked the
folder, left the ``.lock`` it made there (every other file unchanged). The lock file goes as a refused
resume's goes (:meth:`~lightning_fed.federation.version_folder.HeldFolder.release`); a stop after a new
round's checkpoint was written keeps that round's files, and only the lock file goes.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import run_process
from tests.helpers.tiny_run import CHECKPOINT, tiny_run
from tests.test_startup_signals import _start

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "helpers" / "signal_driver.py"
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false", "--federation.local_steps=1"]


def _copy_without_lock(tmp_path_factory, tmp_path: Path) -> Path:
    copy = tmp_path / "backup" / "nolock"
    shutil.copytree(tiny_run(tmp_path_factory) / CHECKPOINT.parents[1], copy, ignore=shutil.ignore_patterns(".lock"))
    return copy


def _tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("stage", ["fit", "validate"])
def test_a_stop_while_it_imports_leaves_the_copied_folder_as_it_was(tmp_path_factory, tmp_path, stage):
    copy = _copy_without_lock(tmp_path_factory, tmp_path)
    before = _tree(copy)
    ckpt = copy / "checkpoints" / "last.ckpt"
    args = [stage, "--config", "configs/tiny.yaml", f"--ckpt_path={ckpt}", *QUIET]
    args += ["--federation.rounds=3"] if stage == "fit" else []
    # the precheck has locked the folder (federation/early_check.py); the live CLI is imported next (cli.py)
    code, stderr, _ = _start(tmp_path, ["-m", "lightning_fed.cli"], args, "lightning_fed.federated_cli", "SIGTERM")
    what = (
        f"no round completed in this run; resume with --ckpt_path {ckpt}" if stage == "fit" else "nothing was written"
    )
    assert (code, stderr) == (143, f"lightning-fed: stopped by SIGTERM; {what}\n")
    assert not (copy / ".lock").exists()
    assert _tree(copy) == before


def test_a_stop_after_a_new_round_keeps_that_round_and_removes_the_lock(tmp_path_factory, tmp_path):
    """SIGTERM as round 2's checkpoint is saved (Lightning's handler: the run stops after it): the round's
    files stay, the ``.lock`` this run made goes."""
    copy = _copy_without_lock(tmp_path_factory, tmp_path)
    ckpt = copy / "checkpoints" / "last.ckpt"
    before = ckpt.read_bytes()
    target = "lightning.pytorch.callbacks.model_checkpoint:ModelCheckpoint._save_checkpoint"
    args = ["fit", "--config", "tiny", f"--ckpt_path={ckpt}", "--federation.rounds=3", *QUIET]
    proc = run_process([sys.executable, str(DRIVER), target, "--", *args], cwd=tmp_path)
    assert proc.returncode == 143, proc.stderr[-3000:]
    shown = ckpt.relative_to(tmp_path)  # under the working directory: as given relative to it (federated_cli._as_given)
    line = f"lightning-fed: stopped by SIGTERM; the last complete round is in {shown}; resume with --ckpt_path {shown}"
    assert proc.stderr.splitlines()[-1] == line, proc.stderr[-3000:]
    assert ckpt.read_bytes() != before  # round 2's
    assert not (copy / ".lock").exists()
