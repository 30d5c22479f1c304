"""Lightning options the federated loop cannot honour, refused before torch (fifth outside run).

On 1ea2a94, from the installed wheel: ``--trainer.fast_dev_run=true`` exited 1 (``RuntimeError:
shape mismatch`` in the batched clients) after ``summary.json`` and ``client_sizes.parquet`` were
written straight into ``runs/tiny/``; ``--trainer.limit_train_batches=0`` exited 0 having trained
nothing; ``trainer.val_check_interval: 0`` exited 1 with Lightning's ``ZeroDivisionError`` after
the run folder was made. Each is now one line, exit 2, torch never imported, nothing written.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import heavy_blocked_env, lightning_fed

QUICK = "for a quick check use --federation.rounds=1 --federation.local_steps=1"
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
