"""A SIGTERM stops every subcommand with a line that says what it left unwritten, in its own words
(red team 15 L8): on f6ad729 ``plan``, ``validate``, ``test`` and ``fit --print_config`` all said fit's
"no round completed in this run, so no checkpoint was written by it".

The signal is sent at a chosen point, without timing: while the process starts (a ``sitecustomize``
signalling when a module is first looked for, tests/test_startup_signals.py) or from inside a function
of the running command (tests/helpers/signal_driver.py).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import run_process
from tests.helpers.tiny_run import CHECKPOINT, tiny_run
from tests.test_startup_signals import _start

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "helpers" / "signal_driver.py"
STOPPED = "lightning-fed: stopped by SIGTERM; "
ROW = '{"prompt": "p", "chosen": "a", "rejected": "b"}\n'
"""A test set of one row (client 0's)."""


@pytest.mark.parametrize(
    ("args", "at"),
    [
        (["validate", "--config", "configs/tiny.yaml"], "torch"),
        (["test", "--config", "configs/tiny.yaml", "--data.init_args.test_dataset={rows}"], "torch"),
        (["fit", "--config", "configs/tiny.yaml", "--print_config"], "torch"),
        (["plan", "--config", "configs/tiny.yaml"], "lightning_fed.plan_cli"),
    ],
    ids=["validate", "test", "print_config", "plan"],
)
def test_a_subcommand_stopped_while_it_starts_says_nothing_was_written(tmp_path, args, at):
    rows = tmp_path / "t.jsonl"
    rows.write_text(ROW)
    args = [a.format(rows=rows) for a in args]
    code, stderr, looked_for = _start(tmp_path, ["-m", "lightning_fed.cli"], args, at, "SIGTERM")
    assert (code, stderr) == (143, f"{STOPPED}nothing was written\n")
    assert looked_for == []


def _driven(target: str, *args: str, cwd: Path = ROOT):
    return run_process([sys.executable, str(DRIVER), target, "--", *args], cwd=cwd)


@pytest.mark.parametrize(
    ("target", "args"),
    [
        ("lightning_fed.plan_cli:main", ["plan", "--config", "configs/tiny.yaml"]),
        ("lightning_fed.federated_cli:run_cli", ["fit", "--config", "configs/tiny.yaml", "--print_config"]),
    ],
    ids=["plan", "print_config"],
)
def test_a_command_that_writes_nothing_says_so_when_stopped(target, args):
    proc = _driven(target, *args)
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1] == f"{STOPPED}nothing was written"
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("stage", "target"),
    [
        ("validate", "lightning_fed.callbacks.evaluation_stage:EvaluationStage.add"),  # while it scores
        ("test", "lightning_fed.federated_cli:FederatedCLI._before_evaluation"),  # while its data is read
    ],
)
def test_an_evaluation_stopped_says_no_results_were_written(tmp_path_factory, tmp_path, stage, target):
    """Exit 143, no ``<stage>_results.json`` in the run folder (a copy: a stage stopped while it scores has
    written its events file there)."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run(tmp_path_factory) / CHECKPOINT.parents[1], run)
    rows = tmp_path / "t.jsonl"
    rows.write_text(ROW)
    args = [stage, "--config", str(run / "config.yaml"), f"--ckpt_path={run / 'checkpoints' / 'last.ckpt'}"]
    args += ["--trainer.enable_progress_bar=false", f"--data.init_args.test_dataset={rows}"]
    proc = _driven(target, *args, cwd=tmp_path)
    assert proc.returncode == 143, proc.stderr[-3000:]
    line = f"{STOPPED}{stage} did not finish, so no {stage}_results.json was written"
    assert proc.stderr.splitlines()[-1] == line, proc.stderr[-3000:]
    assert not (run / f"{stage}_results.json").exists()
