"""Lightning's own bounds on ``trainer.*`` options: exit 2, one line naming option and value, nothing
written (issue 41).

Found from outside with the installed wheel: ``fit --config tiny --trainer.val_check_interval=-0.5``
(and ``=2.5``, ``overfit_batches=-1``, ``fast_dev_run=-1``, ``reload_dataloaders_every_n_epochs=-1``)
exited 1, the code of a failure during training, with Lightning's raw ``MisconfigurationException``
after ~10 s of CPU; ``num_sanity_val_steps=-5`` trained. The numeric bounds are now checked before
torch is imported (:mod:`lightning_fed.trainer_options`), so are a profiler's name and a duration; what
only the Trainer can judge (two options together) is its message, on one line, prefixed ``trainer:``,
when the Trainer is built.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.cli import ENV, lightning_fed, lightning_fed_without_torch

FRACTION = "must be a fraction in [0, 1] or a whole number of batches"
BEFORE_TORCH = {
    "val_check_interval_negative": ("val_check_interval=-0.5", f"trainer.val_check_interval {FRACTION}, got -0.5"),
    "val_check_interval_not_whole": ("val_check_interval=2.5", f"trainer.val_check_interval {FRACTION}, got 2.5"),
    "overfit_batches_negative": ("overfit_batches=-1", f"trainer.overfit_batches {FRACTION}, got -1"),
    "fast_dev_run_negative": ("fast_dev_run=-1", "trainer.fast_dev_run must be an integer >= 0, got -1"),
    "reload_negative": (
        "reload_dataloaders_every_n_epochs=-1",
        "trainer.reload_dataloaders_every_n_epochs must be an integer >= 0, got -1",
    ),
    "num_nodes_zero": ("num_nodes=0", "trainer.num_nodes must be an integer >= 1, got 0"),
    "sanity_steps_below_minus_one": (
        "num_sanity_val_steps=-5",
        "trainer.num_sanity_val_steps must be >= 0, or -1 for all batches, got -5",
    ),
    # Lightning's names and durations (tests/test_class_paths_cli.py: refused by Lightning too)
    "val_check_interval_word": (
        "val_check_interval=abc",
        "trainer.val_check_interval must be a fraction of the epoch, a number of batches or a duration"
        " DD:HH:MM:SS, got 'abc'",
    ),
    "profiler_unknown": (
        "profiler=nope",
        "trainer.profiler 'nope' is not one of Lightning's profiler names; one of simple, advanced, pytorch, xla,"
        " or a Profiler's class_path",
    ),
    "max_time_word": (
        "max_time=abc",
        "trainer.max_time must be a duration DD:HH:MM:SS (e.g. 00:12:00:00) or a mapping such as {hours: 12},"
        " got 'abc'",
    ),
}
WHEN_BUILT = {
    "fraction_without_epochs": (
        "val_check_interval=1.0 --trainer.check_val_every_n_epoch=null",
        "trainer: `val_check_interval` should be an integer or a time-based duration (str 'DD:HH:MM:SS',"
        " datetime.timedelta, or dict kwargs for timedelta) when `check_val_every_n_epoch=None`.",
    ),
}
"""What only the Trainer judges (two options together): its message, when it is built."""


@pytest.mark.parametrize(("override", "line"), list(BEFORE_TORCH.values()), ids=list(BEFORE_TORCH))
def test_a_bound_of_the_trainer_is_checked_before_torch(tmp_path: Path, override: str, line: str):
    run = tmp_path / "run"
    proc = lightning_fed_without_torch(
        "fit",
        "--config",
        "tiny",
        f"--trainer.{override}",
        f"--trainer.default_root_dir={run}",
        cwd=tmp_path,
        hook=tmp_path / "hook",
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hook"]


@pytest.mark.parametrize(("override", "line"), list(WHEN_BUILT.values()), ids=list(WHEN_BUILT))
def test_what_the_trainer_refuses_when_built_is_a_user_error(tmp_path: Path, override: str, line: str):
    """Exit 2 (not 1, kept for failures during training), Lightning's message on one line, no file."""
    run = tmp_path / "run"
    options = [f"--trainer.{option}" for option in override.split(" --trainer.")]
    proc = lightning_fed("fit", "--config", "tiny", *options, f"--trainer.default_root_dir={run}", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(tmp_path.iterdir()) == []


CALLBACK = '''
import lightning.pytorch as pl
from lightning.pytorch.utilities.exceptions import MisconfigurationException


class Misconfigured(pl.Callback):
    """Raises Lightning's MisconfigurationException once training has started."""

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        raise MisconfigurationException("raised during training")
'''


def test_a_misconfiguration_raised_during_training_is_still_exit_1(tmp_path: Path):
    """Only the Trainer's construction is bad input; the same exception once fit runs is a failure."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "misconfigured.py").write_text(CALLBACK)
    env = {**ENV, "PYTHONPATH": os.pathsep.join([ENV["PYTHONPATH"], str(site)])}
    proc = lightning_fed(
        "fit",
        "--config",
        "tiny",
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        "--trainer.enable_progress_bar=false",
        "--federation.local_steps=1",
        "--trainer.callbacks=[{class_path: misconfigured.Misconfigured}]",
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == [
        "error: MisconfigurationException: raised during training"
    ]
