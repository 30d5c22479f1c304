"""``lightning-fed plan`` as a process: a size no run could have is one line naming its option, exit 2.

Before issue 41 (item 7) ``--batch-size 0``/``-3`` reached the activation count (exit 1, a
RuntimeError traceback), ``--runtime-mb nan`` and ``batch_clients: x`` named no option, and
``--max-length 10**12`` was planned although the model holds 256 positions.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_fed.plan_cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
PROG = "lightning-fed plan: error: "


def _plan(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lightning_fed.cli", "plan", *args]
    return subprocess.run(cmd, cwd=cwd, env=ENV, text=True, capture_output=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", "0"], "--batch-size must be an integer >= 1, got 0"),
        (["--batch-size", "-3"], "--batch-size must be an integer >= 1, got -3"),
        (["--max-length", "1"], "--max-length must be an integer >= 2, got 1"),
        (["--runtime-mb", "nan"], "--runtime-mb must be a finite number >= 0, got nan"),
        (["--runtime-mb", "-5"], "--runtime-mb must be a finite number >= 0, got -5.0"),
        (
            ["--max-length", str(10**12)],
            f"--max-length {10**12} is longer than the model's 256 positions (gpt2 config);"
            " the plan would count tokens the model cannot take",
        ),
    ],
    ids=["batch_0", "batch_negative", "length_1", "runtime_nan", "runtime_negative", "length_past_positions"],
)
def test_bad_option_is_one_line_naming_it(tmp_path, capsys, args, message):
    assert main(["--config", str(TINY), *args]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", PROG + message + "\n")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", "0"], "--batch-size must be an integer >= 1, got 0"),
        (["--runtime-mb", "nan"], "--runtime-mb must be a finite number >= 0, got nan"),
        (
            ["--max-length", str(10**12)],
            f"--max-length {10**12} is longer than the model's 256 positions (gpt2 config);"
            " the plan would count tokens the model cannot take",
        ),
    ],
    ids=["batch_0", "runtime_nan", "length_past_positions"],
)
def test_bad_option_as_a_process_exits_2_with_one_line(tmp_path, args, message):
    proc = _plan(tmp_path, "--config", str(TINY), *args)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines()[-1] == PROG + message, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            ("rounds: 3", "rounds: 3\n  batch_clients: x"),
            "federation.batch_clients must be 'off', 'auto' or an integer >= 1, got 'x'",
        ),
        (("batch_size: 4", "batch_size: 0"), "data.batch_size must be >= 1, got 0"),  # the data module's words, as fit
        (
            ("max_length: 160", "max_length: 512"),
            "data.max_length 512 is longer than the model's 256 positions (gpt2 config);"
            " the plan would count tokens the model cannot take",
        ),
    ],
    ids=["batch_clients_x", "config_batch_0", "config_length_past_positions"],
)
def test_bad_config_value_is_one_line_naming_its_key(tmp_path, capsys, edit, message):
    text = TINY.read_text()
    assert edit[0] in text
    config = tmp_path / "bad.yaml"
    config.write_text(text.replace(edit[0], edit[1]))
    assert main(["--config", str(config)]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err.splitlines()[-1]) == ("", PROG + message)


def test_tiny_plans_within_its_positions(capsys):
    assert main(["--config", str(TINY), "--max-length", "256", "--batch-size", "2"]) == 0
    assert "local step: dpo, batch 2 x 256 tokens" in capsys.readouterr().out
