"""Lightning options the federated loop cannot honour, refused before torch (fifth outside run).

On 1ea2a94, from the installed wheel: ``--trainer.fast_dev_run=true`` exited 1 (``RuntimeError:
shape mismatch`` in the batched clients) after ``summary.json`` and ``client_sizes.parquet`` were
written straight into ``runs/tiny/``; ``--trainer.limit_train_batches=0`` exited 0 having trained
nothing; ``trainer.val_check_interval: 0`` exited 1 with Lightning's ``ZeroDivisionError`` after
the run folder was made. Each is now one line, exit 2, torch never imported, nothing written.

Seventh outside run (a8debca): ``trainer.max_epochs: 1``, ``min_epochs: 5`` and ``min_steps: 100``
with ``federation.rounds: 2`` ran 2 rounds, exit 0, the option silently ignored; ``max_steps: 1``
stopped after round 1 of 2, exit 0, ``summary.json`` ``stopped: null``. Each is refused, naming what
sets a federated run's length instead.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import REACHED_TORCH, heavy_blocked_env, lightning_fed, lightning_fed_without_torch

QUICK = "for a quick check use --federation.rounds=1 --federation.local_steps=1"
STEPS = "federation.rounds rounds of federation.local_steps steps per client; set those instead"
CASES = {
    "fast_dev_run_true": (
        "--trainer.fast_dev_run=true",
        f"trainer.fast_dev_run=True cannot drive federated rounds; {QUICK}",
    ),
    "fast_dev_run_2": ("--trainer.fast_dev_run=2", f"trainer.fast_dev_run=2 cannot drive federated rounds; {QUICK}"),
    "no_train_batches": (
        "--trainer.limit_train_batches=0",
        "trainer.limit_train_batches=0 trains nothing; each client's steps per round are federation.local_steps",
    ),
    "no_train_fraction": (
        "--trainer.limit_train_batches=0.0",
        "trainer.limit_train_batches=0.0 trains nothing; each client's steps per round are federation.local_steps",
    ),
    "val_check_interval_0": (
        "--trainer.val_check_interval=0",
        "trainer.val_check_interval must be > 0 (a fraction of a round or a number of batches), got 0",
    ),
    "max_time_zero": (
        "--trainer.max_time=00:00:00:00",
        "trainer.max_time='00:00:00:00' trains nothing: a budget of 0 stops the run before round 1",
    ),
    "max_time_zero_mapping": (
        "--trainer.max_time={seconds: 0}",
        "trainer.max_time={'seconds': 0} trains nothing: a budget of 0 stops the run before round 1",
    ),
    "max_time_negative_mapping": (  # red team 8: ran with exit 0 and no summary.json
        "--trainer.max_time={minutes: -5}",
        "trainer.max_time={'minutes': -5} trains nothing: a budget below 0 stops the run before round 1",
    ),
    "max_epochs": (
        "--trainer.max_epochs=1",
        "trainer.max_epochs=1: a federated run's length is federation.rounds rounds (one epoch each);"
        " set federation.rounds instead",
    ),
    "max_epochs_unlimited": (
        "--trainer.max_epochs=-1",
        "trainer.max_epochs=-1: a federated run's length is federation.rounds rounds (one epoch each);"
        " set federation.rounds instead",
    ),
    "min_epochs": (
        "--trainer.min_epochs=5",
        "trainer.min_epochs=5: a federated run's length is federation.rounds rounds (one epoch each);"
        " set federation.rounds instead",
    ),
    "max_steps": (
        "--trainer.max_steps=1",
        f"trainer.max_steps=1: a federated run's length is {STEPS}",
    ),
    "min_steps": (
        "--trainer.min_steps=100",
        f"trainer.min_steps=100: a federated run's length is {STEPS}",
    ),
}


@pytest.mark.parametrize(("option", "line"), list(CASES.values()), ids=list(CASES))
def test_a_trainer_option_the_loop_cannot_honour_is_one_line_before_torch(tmp_path, option, line):
    work = tmp_path / "work"
    work.mkdir()
    proc = lightning_fed("fit", "--config", "tiny", option, cwd=work, env=heavy_blocked_env(tmp_path / "blocked"))
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(work.iterdir()) == []


def test_the_file_that_set_it_is_named(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "quick.yaml").write_text("trainer:\n  fast_dev_run: true\n")
    config = str(tmp_path / "quick.yaml")
    proc = lightning_fed("fit", "--config", "tiny", "--config", config, cwd=work, env=heavy_blocked_env(tmp_path / "b"))
    line = f"config {config!r}: trainer.fast_dev_run=True cannot drive federated rounds; {QUICK}"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(work.iterdir()) == []


def test_a_length_option_from_a_file_names_the_file(tmp_path):
    """The outside run's case: ``trainer: {max_epochs: 1}`` in the user's config file."""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "run.yaml").write_text("federation:\n  rounds: 2\ntrainer:\n  max_epochs: 1\n")
    config = str(tmp_path / "run.yaml")
    proc = lightning_fed("fit", "--config", "tiny", "--config", config, cwd=work, env=heavy_blocked_env(tmp_path / "b"))
    line = (
        f"config {config!r}: trainer.max_epochs=1: a federated run's length is federation.rounds rounds"
        " (one epoch each); set federation.rounds instead"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("option", ["--trainer.max_epochs=null", "--trainer.max_steps=-1", "--trainer.min_steps=null"])
def test_lightning_s_defaults_leave_the_length_to_the_federation(tmp_path, option):
    """What a run's own ``config.yaml`` records (``max_epochs: null``, ``max_steps: -1``) passes."""
    work = tmp_path / "work"
    work.mkdir()
    proc = lightning_fed_without_torch("fit", "--config", "tiny", option, cwd=work, hook=tmp_path / "hook")
    assert proc.returncode != 0 and REACHED_TORCH in proc.stderr  # past every check made before torch
