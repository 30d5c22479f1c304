"""``--ckpt_path`` refused in one line before the run folder is written (issue 41, fifth outside run).

On 2599077: ``--ckpt_path=`` (empty) ran until Lightning said "`.fit()` found no path for the best
weights: ''" (11-13 s of CPU, ``fit`` and ``validate``); a folder was "no such checkpoint file";
a resume with ``federation.rounds`` below the rounds its run completed exited 1 with Lightning's
``MisconfigurationException`` (``current_epoch=2 ... max_epochs=1``) after 14 s, an events file
added to the earlier run's folder; a missing checkpoint and an unknown ``--config`` printed the
``--debug`` hint under their line. Each answer here is one line, exit 2, nothing written.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import HEAVY_IMPORTED, heavy_blocked_env, lightning_fed
from tests.helpers.tiny_run import ENV, ROOT


def _blocked(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """``lightning-fed ARGS`` from an empty folder (returned), torch and the heavy packages unimportable."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return lightning_fed(*args, cwd=work, env=heavy_blocked_env(tmp_path / "blocked")), work


@pytest.mark.parametrize("stage", ["fit", "validate"])
def test_an_empty_ckpt_path_is_refused_before_torch(tmp_path, stage):
    proc, work = _blocked(tmp_path, stage, "--config", "tiny", "--ckpt_path=")
    line = "ckpt_path '' is empty: give a checkpoint file (<run>/checkpoints/last.ckpt), or leave ckpt_path out"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(work.iterdir()) == []


def test_ckpt_path_last_that_can_resume_nothing_is_refused_naming_where_lightning_looks(tmp_path):
    """Red team 8 row 18 (ck10): on 52f9c49 ``--ckpt_path last`` started a new run, exit 0, Lightning's
    "no last checkpoint available" held back. Lightning looks only in this run's own checkpoint folder,
    which a new run makes new (version_folder.py): ``last`` can resume nothing; the line names the newest
    run's ``last.ckpt`` when there is one."""
    proc, work = _blocked(tmp_path, "fit", "--config", "tiny", "--ckpt_path", "last")
    line = (
        "ckpt_path 'last': this run's new folder 'runs/tiny/lightning_logs/version_0/checkpoints' holds no"
        " last.ckpt (Lightning looks only there) and no run in 'runs/tiny/lightning_logs' has one; leave ckpt_path out"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(work.iterdir()) == []
    ckpt = work / "runs" / "tiny" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"")
    (work / "c.yaml").write_text("ckpt_path: last\n", encoding="utf-8")
    proc, _ = _blocked(tmp_path, "fit", "--config", "tiny", "--config", "c.yaml")
    line = (
        "config 'c.yaml': ckpt_path 'last': this run's new folder 'runs/tiny/lightning_logs/version_1/checkpoints'"
        " holds no last.ckpt (Lightning looks only there); to resume a run give its file:"
        " --ckpt_path runs/tiny/lightning_logs/version_0/checkpoints/last.ckpt"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")


def test_a_run_folder_given_as_ckpt_path_names_its_last_checkpoint(tmp_path):
    run = tmp_path / "work" / "runs" / "lightning_logs" / "version_0"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    proc, _ = _blocked(tmp_path, "fit", "--config", "tiny", "--ckpt_path=runs/lightning_logs/version_0")
    line = (
        "ckpt_path 'runs/lightning_logs/version_0' is a folder, not a checkpoint file;"
        " did you mean 'runs/lightning_logs/version_0/checkpoints/last.ckpt'?"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    proc, _ = _blocked(tmp_path, "fit", "--config", "tiny", "--ckpt_path=/")
    assert (proc.returncode, proc.stderr) == (2, "error: ckpt_path '/' is a folder, not a checkpoint file\n")


@pytest.mark.parametrize("stage", ["fit", "validate"])
def test_a_fifo_or_a_device_as_ckpt_path_is_named_as_what_it_is_never_opened(tmp_path, stage):
    """Red team 15 L3: on f6ad729 a FIFO or ``/dev/zero`` was "no such checkpoint file", though it is there.
    Named by ``stat`` alone: the FIFO has no writer, so opening it would block the child."""
    os.mkfifo(tmp_path / "last.ckpt")
    (tmp_path / "zero.ckpt").symlink_to("/dev/zero")
    for ckpt, kind in [
        (tmp_path / "last.ckpt", "a FIFO"),
        (Path("/dev/zero"), "a character device"),
        (tmp_path / "zero.ckpt", "a symlink to a character device /dev/zero"),
    ]:
        proc, work = _blocked(tmp_path, stage, "--config", "tiny", f"--ckpt_path={ckpt}")
        line = f"ckpt_path {str(ckpt)!r} is {kind}, not a checkpoint file"
        assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
        assert list(work.iterdir()) == []


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("tinyy", "--config 'tinyy': no such file, and no shipped config of that name (did you mean `--config tiny`?)"),
        (
            "zzzz",
            "--config 'zzzz': no such file, and no shipped config of that name (`lightning-fed configs` lists them)",
        ),
    ],
)
def test_an_unknown_config_is_one_line_with_the_closest_shipped_name(tmp_path, name, line):
    proc, work = _blocked(tmp_path, "fit", "--config", name)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(work.iterdir()) == []


def _hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory) -> Path:
    """The ``trainer.default_root_dir`` of two rounds of one local step of ``configs/tiny.yaml``."""
    root = tmp_path_factory.mktemp("two_rounds")
    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", "configs/tiny.yaml"]
    cmd += [f"--trainer.default_root_dir={root}", "--trainer.enable_progress_bar=false"]
    cmd += ["--federation.local_steps=1", "--federation.rounds=2"]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)  # no time-out: CI is slow
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def test_a_resume_with_fewer_rounds_than_its_run_completed_is_refused_keeping_the_run(two_rounds):
    """Lightning's own refusal (``max_epochs`` below the restored epoch) came after the run folder's
    events file was added; the line comes from the checkpoint read before Lightning is imported."""
    ckpt = two_rounds / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    before = _hashes(two_rounds)
    args = ["fit", "--config", "configs/tiny.yaml", f"--trainer.default_root_dir={two_rounds}"]
    args += ["--federation.local_steps=1", "--federation.rounds=1", f"--ckpt_path={ckpt}"]
    proc = lightning_fed(*args)
    line = (
        f"ckpt_path {str(ckpt)!r}: its run completed 2 rounds, federation.rounds=1 is fewer;"
        " resume with federation.rounds > 2 to train more"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert _hashes(two_rounds) == before


@pytest.mark.parametrize("stage", ["validate"])
def test_ckpt_path_last_in_validate_is_refused_naming_the_newest_run(tmp_path, stage):
    """Red team 9 row 1b (v_last): on 9e8f7fb ``validate --ckpt_path last`` found no ``last.ckpt`` in its
    own new run folder and scored the untrained model, exit 0, 24 s of CPU. ``last`` is looked up as in
    ``fit`` (Lightning's ``_parse_ckpt_path`` looks in this run's checkpoint folder for every stage)."""
    proc, work = _blocked(tmp_path, stage, "--config", "tiny", "--ckpt_path", "last")
    line = (
        "ckpt_path 'last': this run's new folder 'runs/tiny/lightning_logs/version_0/checkpoints' holds no"
        " last.ckpt (Lightning looks only there) and no run in 'runs/tiny/lightning_logs' has one;"
        " give a checkpoint file (<run>/checkpoints/last.ckpt)"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(work.iterdir()) == []
    ckpt = work / "runs" / "tiny" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"")
    proc, _ = _blocked(tmp_path, stage, "--config", "tiny", "--ckpt_path", "last")
    line = (
        "ckpt_path 'last': this run's new folder 'runs/tiny/lightning_logs/version_1/checkpoints'"
        f" holds no last.ckpt (Lightning looks only there); to {stage} a run give its file:"
        " --ckpt_path runs/tiny/lightning_logs/version_0/checkpoints/last.ckpt"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert sorted(p.name for p in (work / "runs" / "tiny" / "lightning_logs").iterdir()) == ["version_0"]


@pytest.mark.parametrize("stage", ["fit", "validate"])
def test_ckpt_path_best_and_hpc_that_find_nothing_are_refused_before_torch(tmp_path, stage):
    """Red team 9 row 11 (ck_best, ck_hpc, v_best): on 9e8f7fb Lightning refused ``best`` ("`ModelCheckpoint`
    is not configured to save the best model": a new process's ModelCheckpoint has saved no best) and
    ``hpc`` ("no HPC checkpoint was found" in ``default_root_dir``) after 11 s, two lines."""
    verb = "resume" if stage == "fit" else stage
    give = f"to {verb} a run give its file: --ckpt_path runs/tiny/lightning_logs/version_0/checkpoints/last.ckpt"
    work = tmp_path / "work"
    ckpt = work / "runs" / "tiny" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"")
    proc, _ = _blocked(tmp_path, stage, "--config", "tiny", "--ckpt_path", "best")
    line = (
        "ckpt_path 'best': a new run has no best checkpoint (Lightning knows the best only in the run that saved"
        f" it; each run keeps checkpoints/last.ckpt); {give}"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    proc, _ = _blocked(tmp_path, stage, "--config", "tiny", "--ckpt_path", "hpc")
    line = (
        "ckpt_path 'hpc': trainer.default_root_dir 'runs/tiny' holds no hpc_ckpt_<n>.ckpt"
        f" (Lightning looks only there); {give}"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert sorted(p.name for p in (work / "runs" / "tiny").iterdir()) == ["lightning_logs"]
    assert sorted(p.name for p in (work / "runs" / "tiny" / "lightning_logs").iterdir()) == ["version_0"]


@pytest.mark.parametrize("stage", ["fit", "validate"])
def test_ckpt_path_hpc_reads_the_file_lightning_would_resume_and_names_it(tmp_path, stage):
    """Red team 10 rows 1b/1c (k_hpc_garbage, k_val_hpc): on 3d730d7 ``--ckpt_path hpc`` with a damaged
    ``hpc_ckpt_1.ckpt`` in ``trainer.default_root_dir`` exited 1 with torch's ``UnpicklingError`` (two
    lines, the file not named) after the run folder's ``.lock`` and events file were written. The file
    Lightning picks (the largest number) gets every check a file given by path gets."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "hpc_ckpt_2.ckpt").write_bytes(b"not a checkpoint\n" * 300)
    (root / "hpc_ckpt_1.ckpt").write_bytes(b"")
    args = [stage, "--config", "configs/tiny.yaml", f"--trainer.default_root_dir={root}", "--ckpt_path", "hpc"]
    proc = lightning_fed(*args)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith(f"error: ckpt_path '{root / 'hpc_ckpt_2.ckpt'}': ")
    assert proc.stderr.count("\n") == 1
    assert sorted(p.name for p in root.iterdir()) == ["hpc_ckpt_1.ckpt", "hpc_ckpt_2.ckpt"]


def test_a_resume_by_ckpt_path_hpc_with_a_changed_lr_is_refused_as_by_its_path(two_rounds, tmp_path):
    """Red team 10 row 1 (k_hpc_lr): on 3d730d7 ``--ckpt_path hpc`` resumed a copied ``last.ckpt`` with a
    changed ``model.lr``, exit 0; the same file given by its path was refused (``model.lr: 0.005 -> 0.001``).
    The config the checkpoint holds is compared (no ``config.yaml`` beside an ``hpc_ckpt_<n>.ckpt``)."""
    root = tmp_path / "root"
    root.mkdir()
    ckpt = root / "hpc_ckpt_1.ckpt"
    ckpt.write_bytes((two_rounds / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt").read_bytes())
    args = ["fit", "--config", "configs/tiny.yaml", f"--trainer.default_root_dir={root}", "--ckpt_path", "hpc"]
    args += ["--federation.local_steps=1", "--federation.rounds=3", "--model.init_args.lr=0.001"]
    proc = lightning_fed(*args)
    line = (
        f"ckpt_path '{ckpt}' was written by a run with another config: model.lr: 0.005 -> 0.001;"
        " resume with the run's own config, or start a new run without --ckpt_path"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert sorted(p.name for p in root.iterdir()) == ["hpc_ckpt_1.ckpt"]


@pytest.mark.parametrize("stage", ["validate"])  # `test` first needs data.test_dataset (refused before)
def test_evaluating_a_checkpoint_with_another_lora_layout_is_refused_before_torch(two_rounds, tmp_path, stage):
    """Red team 11 row 8: ``validate --ckpt_path <run>/checkpoints/last.ckpt --model.init_args.lora.r=2``
    was refused after torch and the model were built (11 s of CPU), ``fit`` the same change before torch."""
    ckpt = two_rounds / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    before = _hashes(two_rounds)
    args = [stage, "--config", "tiny", f"--trainer.default_root_dir={tmp_path / 'run'}", f"--ckpt_path={ckpt}"]
    proc, _ = _blocked(tmp_path, *args, "--model.init_args.lora.r=2")
    line = (
        f"ckpt_path {str(ckpt)!r} holds the weights of another model: model.lora.r: 4 -> 2;"
        " evaluate it with the config it was trained with"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert _hashes(two_rounds) == before
    assert not (tmp_path / "run").exists()


def test_a_resume_with_other_synthetic_groups_is_refused_before_torch(two_rounds, tmp_path):
    """Red team 11 row 12 (res_groups): ``data.synthetic_args.groups`` changed on resume was refused only
    after torch and the model were built, ``model.lr`` before torch."""
    ckpt = two_rounds / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    before = _hashes(two_rounds)
    args = ["fit", "--config", "tiny", f"--trainer.default_root_dir={two_rounds}", f"--ckpt_path={ckpt}"]
    args += ["--federation.local_steps=1", "--federation.rounds=3"]
    args += ["--data.init_args.synthetic_args={examples_per_client: 24, groups: [negative]}"]
    proc, _ = _blocked(tmp_path, *args)
    line = (
        f"ckpt_path {str(ckpt)!r} was written by a run with another config:"
        " data.synthetic_args.groups: ['positive'] -> ['negative'];"
        " resume with the run's own config, or start a new run without --ckpt_path"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert _hashes(two_rounds) == before


def test_a_damaged_round_record_before_the_last_is_refused_before_torch_keeping_the_folder(two_rounds, tmp_path):
    """Red team 17 B18: on 75a286d a ``rounds.jsonl`` whose line 1 of 2 was damaged was not checked at
    resume: the resume trained a round, replaced ``last.ckpt`` and ``config.yaml``, then died with a bare
    ``error: JSONDecodeError: ...`` (exit 1), checkpoint and ``summary.json`` disagreeing. The record is
    read before torch, before the run folder is held, and refused naming the file and its line."""
    run = tmp_path / "copy"
    shutil.copytree(two_rounds / "lightning_logs" / "version_0", run)
    rounds = run / "rounds.jsonl"
    lines = rounds.read_bytes().splitlines(keepends=True)
    assert len(lines) == 2
    rounds.write_bytes(b'{"round": 1, "broken"\n' + lines[1])
    before = _hashes(run)
    ckpt = run / "checkpoints" / "last.ckpt"
    args = ["fit", "--config", "tiny", f"--ckpt_path={ckpt}", "--federation.local_steps=1", "--federation.rounds=3"]
    proc, work = _blocked(tmp_path, *args)
    line = (
        f"ckpt_path {str(ckpt)!r}: {rounds}: line 1 is not JSON (a damaged round record; the resume reads"
        " the run's round history from it): restore the file from a copy of the run folder"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert _hashes(run) == before
    assert list(work.iterdir()) == []
    rounds.write_bytes(b"[1]\n" + lines[1])  # JSON, but no round record
    proc, _ = _blocked(tmp_path, *args)
    line = (
        f"ckpt_path {str(ckpt)!r}: {rounds}: line 1 is not a round record (a JSON object with a round number;"
        " the resume reads the run's round history from it): restore the file from a copy of the run folder"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")


def test_a_resume_with_no_round_left_whose_summary_is_damaged_is_refused_before_lightning(two_rounds, tmp_path):
    """Red team 17 B19: on 75a286d a resume whose checkpoint had completed ``federation.rounds`` (it trains no
    round and reports the folder's ``summary.json``) in a folder whose ``summary.json`` was damaged exited 1
    with a bare ``error: JSONDecodeError: ...`` after Lightning was imported. The summary is read with the
    checkpoint, before Lightning, and refused naming the file; the folder stays byte for byte."""
    run = tmp_path / "copy"
    shutil.copytree(two_rounds / "lightning_logs" / "version_0", run)
    summary = run / "summary.json"
    summary.write_text('{"rounds": [\n', encoding="utf-8")
    before = _hashes(run)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HEAVY_IMPORTED.format(path=str(tmp_path / "heavy.txt")))
    env = {**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"}
    ckpt = run / "checkpoints" / "last.ckpt"
    args = ["fit", "--config", "tiny", f"--ckpt_path={ckpt}", "--federation.local_steps=1", "--federation.rounds=2"]
    proc = lightning_fed(*args, cwd=tmp_path, env=env)
    line = (
        f"ckpt_path {str(ckpt)!r}: its run completed 2 rounds, federation.rounds=2 trains none, and the result"
        f" such a resume reports, {summary}, is not JSON (a damaged file): restore it from a copy of the run"
        " folder, or resume with federation.rounds > 2 (a resume that trains writes it anew)"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert (tmp_path / "heavy.txt").read_text() == ""
    assert _hashes(run) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "heavy.txt", "hook"]
