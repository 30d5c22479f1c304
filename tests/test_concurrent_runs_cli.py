"""Runs started together in one ``default_root_dir`` never write into one folder
(lightning_fed/federation/version_folder.py; docs/guides/resume-signals.md).

Lightning's loggers listed the ``version_*`` folders and created theirs later with ``exist_ok``:
two runs started together both took ``version_0`` (an outside tester found one run's
``config.yaml`` beside the other's ``summary.json``). The race is made deterministic: a
``sitecustomize`` (:data:`RACE`) creates ``version_0`` right after the run's first listing of
``lightning_logs``, as a run started a moment later would; one test starts two real processes.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import ENV, ROOT, lightning_fed

TINY = [
    "--config",
    "configs/tiny.yaml",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--federation.rounds=1",
    "--federation.local_steps=1",
]

RACE = """
import os

_FOLDER = os.path.abspath(os.environ["RACE_FOLDER"])
_scandir = os.scandir
_done = []


class _Listed(list):
    def __enter__(self):
        return iter(self)

    def __exit__(self, *exc):
        return False


def _other_run():
    os.mkdir(os.path.join(_FOLDER, "version_0"))
    with open(os.path.join(_FOLDER, "version_0", "other-run.txt"), "w") as f:
        f.write("another run's file")


def scandir(path="."):
    if _done or os.path.abspath(os.fsdecode(path)) != _FOLDER:
        return _scandir(path)
    _done.append(True)
    try:
        with _scandir(path) as it:
            listed = _Listed(it)
    finally:
        _other_run()  # made after this run listed the folder, before it claims one
    return listed


os.scandir = scandir
"""
"""A ``sitecustomize``: after the first listing of ``$RACE_FOLDER``, another run makes ``version_0``."""


def _fit(root: Path, seed: int, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return lightning_fed(
        "fit", *TINY, f"--trainer.default_root_dir={root}", f"--seed_everything={seed}", *extra, env=env
    )


def _assert_one_run(folder: Path, seed: int) -> None:
    """``folder`` holds the records of one run, seeded ``seed``, each whole."""
    config = yaml.safe_load((folder / "config.yaml").read_text())
    summary = json.loads((folder / "summary.json").read_text())
    rounds = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    assert config["seed_everything"] == seed and summary["config"]["seed_everything"] == seed
    assert [r["round"] for r in rounds] == sorted({r["round"] for r in rounds})
    assert (folder / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.parametrize("logger", [[], ["--trainer.logger=false"]], ids=["tensorboard", "no_logger"])
def test_a_run_does_not_write_into_a_version_folder_made_after_its_listing(tmp_path, logger):
    runs = tmp_path / "root" / "lightning_logs"
    runs.mkdir(parents=True)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(RACE)
    env = {**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}", "RACE_FOLDER": str(runs)}
    proc = _fit(runs.parent, 3, *logger, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.listdir(runs / "version_0") == ["other-run.txt"]  # the other run's folder, untouched
    assert sorted(os.listdir(runs)) == ["version_0", "version_1"]
    _assert_one_run(runs / "version_1", 3)


def test_two_runs_started_together_each_get_their_own_folder(tmp_path):
    root = tmp_path / "root"
    argv = [sys.executable, "-m", "lightning_fed.cli", "fit", *TINY, f"--trainer.default_root_dir={root}"]
    procs = {
        seed: subprocess.Popen(
            [*argv, f"--seed_everything={seed}"], cwd=ROOT, env=ENV, text=True, stderr=subprocess.PIPE
        )
        for seed in (1, 2)
    }
    for proc in procs.values():
        _, err = proc.communicate(timeout=1800)
        assert proc.returncode == 0, err[-3000:]
    runs = root / "lightning_logs"
    assert sorted(os.listdir(runs)) == ["version_0", "version_1"]
    seeds = sorted(yaml.safe_load((runs / v / "config.yaml").read_text())["seed_everything"] for v in os.listdir(runs))
    assert seeds == [1, 2]
    for version in os.listdir(runs):
        folder = runs / version
        _assert_one_run(folder, yaml.safe_load((folder / "config.yaml").read_text())["seed_everything"])


def test_a_resume_of_a_folder_another_run_holds_is_refused_then_resumes(tmp_path):
    root = tmp_path / "root"
    first = _fit(root, 5)
    assert first.returncode == 0, first.stderr[-3000:]
    folder = root / "lightning_logs" / "version_0"
    ckpt = folder / "checkpoints" / "last.ckpt"
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    resume = ("--federation.rounds=2", f"--ckpt_path={ckpt}")

    with open(folder / ".lock", "a+b") as held:  # another resume of it, still running
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused = _fit(root, 5, *resume)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert [line for line in refused.stderr.splitlines() if line.strip()] == [
        f"error: ckpt_path {str(ckpt)!r}: another run holds its run folder {str(folder)!r} (.lock is locked);"
        " resume once that run has ended"
    ]
    assert sorted(os.listdir(root / "lightning_logs")) == ["version_0"]  # no folder claimed either
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before

    resumed = _fit(root, 5, *resume)  # the other run has ended; this one holds it from before torch
    assert resumed.returncode == 0, resumed.stderr[-3000:]  # the run adopted that hold: not refused by it
    with open(folder / ".lock", "a+b") as lock:  # let go at its exit: a later resume may take it
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert sorted(os.listdir(root / "lightning_logs")) == ["version_0"]
    assert [json.loads(line)["round"] for line in (folder / "rounds.jsonl").read_text().splitlines()][-1] == 2


def test_a_resume_of_a_held_folder_is_refused_before_torch(tmp_path):
    """Red team 8 (c): the refusal came after the imports (13 s of CPU); the docs promise it before the
    data loads. The child cannot import torch: the lock is looked at before (early_check.held_problem),
    creating nothing; the checkpoint's bytes are not read for it."""
    from tests.helpers.cli import lightning_fed_without_torch

    cwd = tmp_path / "cwd"
    folder = cwd / "runs" / "tiny" / "lightning_logs" / "version_0"
    (folder / "checkpoints").mkdir(parents=True)
    ckpt = folder / "checkpoints" / "last.ckpt"
    ckpt.write_bytes(b"not read")
    with open(folder / ".lock", "a+b") as held:  # a resume of it, still running
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = lightning_fed_without_torch(
            "fit",
            "--config",
            "tiny",
            "--ckpt_path",
            "runs/tiny/lightning_logs/version_0/checkpoints/last.ckpt",
            cwd=cwd,
            hook=tmp_path / "hook",
        )
    line = (
        "error: ckpt_path 'runs/tiny/lightning_logs/version_0/checkpoints/last.ckpt': another run holds its run"
        f" folder {str(folder)!r} (.lock is locked); resume once that run has ended\n"
    )
    assert (proc.returncode, proc.stderr) == (2, line)
    assert sorted(p.name for p in folder.rglob("*")) == [".lock", "checkpoints", "last.ckpt"]


AT_TORCH = """
import fcntl
import os
import sys


class AtTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":  # is the run folder's lock held (by the run itself) when torch is imported?
            descriptor = os.open(os.environ["LOCK_AT_TORCH"], os.O_RDONLY)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                state = "free"
            except BlockingIOError:
                state = "held"
            finally:
                os.close(descriptor)
            raise ImportError(f"torch imported; the run folder's lock: {state}")
        return None


sys.meta_path.insert(0, AtTorch())
"""
"""A ``sitecustomize`` that says, as torch is imported, whether the run folder's lock is taken."""


def test_a_resume_holds_its_run_folder_from_before_torch(tmp_path):
    """Red team 9 row 8: the early check only looked at the lock, and the run took it after the
    imports, so a second resume started in those seconds passed the look (one ran to an end having
    trained nothing, its events file added to the first run's folder; one was refused after torch).
    The early check now takes the lock itself, before torch, and the run keeps it: a second resume
    is refused before torch in every interleaving (test_a_resume_of_a_held_folder_is_refused_before_torch)."""
    proc, folder = _stopped_at_torch(tmp_path, "fit", lock_file=True)
    assert "error: ImportError: torch imported; the run folder's lock: held\n" in proc.stderr, proc.stderr
    assert proc.returncode == 2
    with open(folder / ".lock", "a+b") as lock:  # let go when the process ended
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert sorted(p.name for p in folder.rglob("*")) == [".lock", "checkpoints", "last.ckpt"]


@pytest.mark.parametrize("stage", ["validate", "test"])
def test_validate_of_a_folder_another_run_holds_is_refused_before_torch(tmp_path, stage):
    """Red team 10 row 11: ``validate`` of a run a resume was still training wrote
    ``validate_results.json`` and an events file into that run's folder (exit 0). ``validate`` and
    ``test`` write into the checkpoint's run folder, so they hold it as a resume does
    (early_check.hold_evaluated), and a folder another live process holds is refused before torch,
    nothing written. On a8354b9 the child went on to torch (exit 2 at ``import torch``)."""
    from tests.helpers.cli import lightning_fed_without_torch

    cwd = tmp_path / "cwd"
    folder = cwd / "runs" / "tiny" / "lightning_logs" / "version_0"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"not read")
    ckpt = "runs/tiny/lightning_logs/version_0/checkpoints/last.ckpt"
    rows = tmp_path / "test.jsonl"  # `test` needs a test set (refused before otherwise)
    rows.write_text('{"prompt": "p", "chosen": "a", "rejected": "b", "client_id": 0}\n')
    given = [f"--data.init_args.test_dataset={rows}"] if stage == "test" else []
    with open(folder / ".lock", "a+b") as held:  # a resume of it, still running (this process)
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = lightning_fed_without_torch(
            stage, "--config", "tiny", "--ckpt_path", ckpt, *given, cwd=cwd, hook=tmp_path / "hook"
        )
    line = (
        f"error: ckpt_path {ckpt!r}: another run holds its run folder {str(folder)!r} (.lock is locked);"
        f" {stage} once that run has ended\n"
    )
    assert (proc.returncode, proc.stderr) == (2, line)
    names = [".lock", "checkpoints", "last.ckpt", "lightning_logs", "runs", "tiny", "version_0"]
    assert sorted(p.name for p in cwd.rglob("*")) == names


def _stopped_at_torch(tmp_path, subcommand: str, lock_file: bool):
    """``SUBCOMMAND --config tiny --ckpt_path`` an earlier run's last.ckpt (its folder with a lock file or
    none), the child stopped as it imports torch (AT_TORCH says whether the folder's lock is held then):
    the finished process and the run folder."""
    cwd, hook = tmp_path / "cwd", tmp_path / "hook"
    folder = cwd / "runs" / "tiny" / "lightning_logs" / "version_0"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"read with torch")
    if lock_file:
        (folder / ".lock").touch()
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(AT_TORCH)
    env = {**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}", "LOCK_AT_TORCH": str(folder / ".lock")}
    ckpt = "runs/tiny/lightning_logs/version_0/checkpoints/last.ckpt"
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_fed", subcommand, "--config", "tiny", "--ckpt_path", ckpt],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc, folder


def test_a_validate_holds_the_run_folder_it_writes_into_from_before_torch(tmp_path):
    """The hold is taken before torch and kept (a resume started meanwhile is refused): the lock is held
    when torch is imported (AT_TORCH), and the lock file ``validate`` made in a folder that had none is
    gone when it ends. On a8354b9: free."""
    proc, folder = _stopped_at_torch(tmp_path, "validate", lock_file=False)
    assert "error: ImportError: torch imported; the run folder's lock: held\n" in proc.stderr, proc.stderr
    assert proc.returncode == 2
    assert sorted(p.name for p in folder.rglob("*")) == ["checkpoints", "last.ckpt"]


def test_a_refused_resume_leaves_no_lock_file_in_an_earlier_run_s_folder(tmp_path):
    """A run folder without a lock file (copied without it, or written before runs took one): a resume
    refused before torch (a changed model.lr against the folder's config.yaml) took the lock, making the
    file, and left it behind (a8354b9: ``.lock`` added). The file this run made goes as it lets go.
    A lock file left by a run that has ended blocks no one: the kernel dropped its ``flock``
    (test_a_resume_holds_its_run_folder_from_before_torch starts from one)."""
    from tests.helpers.cli import lightning_fed_without_torch

    cwd = tmp_path / "cwd"
    folder = cwd / "runs" / "tiny" / "lightning_logs" / "version_0"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"not read")
    (folder / "config.yaml").write_text((ROOT / "lightning_fed" / "configs" / "tiny.yaml").read_text())
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    ckpt = "runs/tiny/lightning_logs/version_0/checkpoints/last.ckpt"
    proc = lightning_fed_without_torch(
        "fit", "--config", "tiny", "--ckpt_path", ckpt, "--model.init_args.lr=0.5", cwd=cwd, hook=tmp_path / "hook"
    )
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: ckpt_path {ckpt!r} was written by a run with another config: model.lr: 0.005 -> 0.5; resume with"
        " the run's own config, or start a new run without --ckpt_path\n",
    )
    assert sorted(p.name for p in folder.rglob("*")) == ["checkpoints", "config.yaml", "last.ckpt"]
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
