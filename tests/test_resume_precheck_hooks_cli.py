"""A resume whose ``federation.hooks`` differ from the run's, refused before torch (issue 41 row 1).

The run here was trained with two round hooks (a cosine and a step :class:`RoundLRSchedule`); a resume
that drops them, keeps fewer, reorders them or changes one by leaving an argument to its default is
refused by :mod:`lightning_fed.resume_precheck` with the live check's line, nothing of the run folder
changed. Adding a hook is tests/test_checkpoint_boundary.py's (48704f7).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch
from tests.helpers.tiny_run import ARGS, CHECKPOINT, ENV, ROOT

HOOKS = (
    "federation:\n  hooks:\n"
    "    - class_path: lightning_fed.callbacks.RoundLRSchedule\n      init_args: {schedule: cosine}\n"
    "    - class_path: lightning_fed.callbacks.RoundLRSchedule\n      init_args: {schedule: step}\n"
)
RUN_HOOKS = "['lightning_fed.callbacks.RoundLRSchedule', 'lightning_fed.callbacks.RoundLRSchedule']"
"""The run's ``federation.hooks`` (its ``config.yaml``'s) as a change of their count shows them: their classes."""


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The checkpoint of one round of one step of configs/tiny.yaml with :data:`HOOKS` (read only).

    Trained for real, once per module (about 10 s of CPU, 35 s of wall time under load): the run
    folder's ``config.yaml`` and ``summary.json`` are what a run with hooks writes, not a copy edited
    to look like one (an edit that misses one of them is left to the live check, and passes for that)."""
    root = tmp_path_factory.mktemp("hooked_run")
    (root / "hooks.yaml").write_text(HOOKS)
    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", "configs/tiny.yaml"]
    cmd += ["--config", str(root / "hooks.yaml"), f"--trainer.default_root_dir={root / 'run'}", *ARGS]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)  # no time-out: CI is slow
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run" / CHECKPOINT


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _hooks_file(folder: Path, *schedules: str) -> str:
    path = folder / "hooks.yaml"
    items = "".join(
        f"    - class_path: lightning_fed.callbacks.RoundLRSchedule\n      init_args: {{schedule: {s}}}\n"
        for s in schedules
    )
    path.write_text(f"federation:\n  hooks:\n{items}")
    return str(path)


CASES = {
    # issue 41 row 1: late on 3df2116 (the live check's line after torch and the model's build, 9 s of CPU)
    "dropped": (lambda tmp: [], None, f"federation.hooks: {RUN_HOOKS} -> None"),
    "left_to_defaults": (
        lambda tmp: ["--federation.hooks=[RoundLRSchedule,RoundLRSchedule]"],
        None,
        "federation.hooks[1].schedule: 'step' -> 'cosine'",
    ),
    # their neighbours, already refused before torch on 3df2116
    "fewer": (
        lambda tmp: ["--config", _hooks_file(tmp, "step")],
        "hooks.yaml",
        f"federation.hooks: {RUN_HOOKS} -> ['lightning_fed.callbacks.RoundLRSchedule']",
    ),
    "reordered": (
        lambda tmp: ["--config", _hooks_file(tmp, "step", "cosine")],
        "hooks.yaml",
        "federation.hooks[0].schedule: 'cosine' -> 'step' (and 1 more: federation.hooks[1].schedule)",
    ),
    "emptied": (lambda tmp: ["--federation.hooks=[]"], None, f"federation.hooks: {RUN_HOOKS} -> []"),
    # red team 14 L9: an argument changed printed both whole hook lists (~500 characters); now the hook's
    # argument, old -> new. Seen failing on 08c1cba (the whole lists).
    "argument_changed": (
        lambda tmp: ["--config", _hooks_file(tmp, "step", "step")],
        "hooks.yaml",
        "federation.hooks[0].schedule: 'cosine' -> 'step'",
    ),
    "another_class": (
        lambda tmp: ["--federation.hooks=[RoundLRSchedule, lightning_fed.heterogeneity.SystemHeterogeneity]"],
        None,
        "federation.hooks[1]: 'lightning_fed.callbacks.RoundLRSchedule'"
        " -> 'lightning_fed.heterogeneity.SystemHeterogeneity'",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_resume_without_the_run_s_hooks_is_refused_before_torch(tmp_path, trained, case):
    """Issue 41 row 1: a run trained with ``federation.hooks`` resumed with a config that gives none (or
    leaves a hook's argument to its default) was refused only after torch and the model's build (exit 2,
    9 s of CPU on 3df2116: the child's ImportError here), while adding one was refused before. Now the
    same line before torch, naming the file that set the new value (none for the default), every file
    of the run folder byte for byte as it was."""
    extra, named, change = CASES[case]
    root = trained.parents[3]
    before = _files(root)
    (tmp_path / "cwd").mkdir()
    proc = lightning_fed_without_torch(
        "fit",
        "--config",
        "tiny",
        *extra(tmp_path),
        f"--trainer.default_root_dir={root}",
        "--federation.local_steps=1",
        "--federation.rounds=2",
        f"--ckpt_path={trained}",
        cwd=tmp_path / "cwd",
        hook=tmp_path / "hook",
    )
    assert REACHED_TORCH not in proc.stderr
    prefix = f"config {str(tmp_path / named)!r}: " if named else ""
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: {prefix}ckpt_path {str(trained)!r} was written by a run with another config: {change};"
        " resume with the run's own config, or start a new run without --ckpt_path\n",
    )
    assert _files(root) == before
    assert list((tmp_path / "cwd").iterdir()) == []


def test_a_resume_with_the_run_s_hooks_goes_on_to_the_checkpoint(tmp_path, trained):
    """The run's own hooks, as given (a short class name, the arguments left to their defaults): not refused here."""
    (tmp_path / "cwd").mkdir()
    proc = lightning_fed_without_torch(
        "fit",
        "--config",
        "tiny",
        "--federation.hooks=[{class_path: RoundLRSchedule},"
        " {class_path: RoundLRSchedule, init_args: {schedule: step}}]",
        f"--trainer.default_root_dir={trained.parents[3]}",
        "--federation.local_steps=1",
        "--federation.rounds=2",
        f"--ckpt_path={trained}",
        cwd=tmp_path / "cwd",
        hook=tmp_path / "hook",
    )
    assert REACHED_TORCH in proc.stderr, proc.stderr


def test_a_changed_hook_argument_left_to_the_live_check_is_named_alone(tmp_path, trained):
    """Red team 14 L9 after torch: where the precheck cannot decide (here the run folder's ``config.yaml`` and
    ``summary.json`` disagree on the hooks, so the checkpoint decides), the live check
    (config_changes.compare_configs) refused a changed hook argument with both whole hook lists (~300
    characters); now with that argument alone, by the precheck's own rule (config_changes.class_list_changes).
    On a2f8dcc: ``... another config: federation.hooks: [{'class_path': 'lightning_fed.callbacks.RoundLRSchedule',
    ...}] -> [...]; ...``."""
    import shutil

    from tests.helpers.cli import lightning_fed

    run = tmp_path / "copy"
    shutil.copytree(trained.parents[1], run)
    config = (run / "config.yaml").read_text()
    edited = config.replace("schedule: cosine", "schedule: step", 1)
    assert edited != config
    (run / "config.yaml").write_text(edited)  # the precheck skips the hooks: the checkpoint decides
    ckpt = run / "checkpoints" / "last.ckpt"
    proc = lightning_fed(
        "fit",
        "--config",
        "tiny",
        "--config",
        _hooks_file(tmp_path, "step", "step"),
        "--federation.local_steps=1",
        "--federation.rounds=2",
        "--trainer.enable_progress_bar=false",
        f"--ckpt_path={ckpt}",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1] == (
        f"error: ckpt_path {str(ckpt)!r} was written by a run with another config:"
        " federation.hooks[0].schedule: 'cosine' -> 'step'; resume with the run's own config, or start a new run"
        " without --ckpt_path"
    ), proc.stderr[-3000:]


def _hooks_with_gamma(folder: Path, gamma: str) -> str:
    """:data:`HOOKS` with the second hook's ``gamma`` given as the YAML text ``gamma``."""
    path = folder / "hooks.yaml"
    path.write_text(HOOKS.replace("{schedule: step}", f"{{schedule: step, gamma: {gamma}}}"))
    return str(path)


QUOTED = {
    "float": (lambda tmp: ['--model.init_args.lr="0.006"'], None, "model.lr: 0.005 -> 0.006"),
    "integer": (lambda tmp: ["--data.init_args.num_clients='5'"], None, "data.num_clients: 4 -> 5"),
    "exponent": (lambda tmp: ['--model.init_args.beta="1e-1"'], None, "model.beta: 0.5 -> 0.1"),
    "hook_argument": (
        lambda tmp: ["--config", _hooks_with_gamma(tmp, "'0.25'")],
        "hooks.yaml",
        "federation.hooks[1].gamma: 0.5 -> 0.25",
    ),
}


@pytest.mark.parametrize("case", list(QUOTED))
def test_a_quoted_number_a_resume_changes_is_shown_as_the_number(tmp_path, trained, case):
    """Red team 15 L3: a quoted number is the number to the parser (``lr: "0.006"`` trains at 0.006), and the
    live check names it so; the precheck's line showed the text (``model.lr: 0.005 -> '0.006'``). Now the
    number, as an unquoted one is shown, before torch, the run folder untouched."""
    extra, named, change = QUOTED[case]
    root = trained.parents[3]
    before = _files(root)
    (tmp_path / "cwd").mkdir()
    proc = lightning_fed_without_torch(
        "fit",
        "--config",
        "tiny",
        "--config",
        str(trained.parents[4] / "hooks.yaml"),  # the run's own hooks (the fixture's file)
        *extra(tmp_path),
        f"--trainer.default_root_dir={root}",
        "--federation.local_steps=1",
        "--federation.rounds=2",
        f"--ckpt_path={trained}",
        cwd=tmp_path / "cwd",
        hook=tmp_path / "hook",
    )
    assert REACHED_TORCH not in proc.stderr
    prefix = f"config {str(tmp_path / named)!r}: " if named else ""
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: {prefix}ckpt_path {str(trained)!r} was written by a run with another config: {change};"
        " resume with the run's own config, or start a new run without --ckpt_path\n",
    )
    assert _files(root) == before
    assert list((tmp_path / "cwd").iterdir()) == []
