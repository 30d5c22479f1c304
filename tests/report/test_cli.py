"""``lightning-fed report`` as a process: exit 0 with its files, bad input in one line with exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_fed.cli import console_main
from tests.report.hand_runs import make_run

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", "report", *args], cwd=cwd, env=ENV, text=True, capture_output=True
    )


def test_report_process_writes_its_files_from_a_glob(tiny_runs, tmp_path):
    glob = str(tiny_runs["fedavg/s0"].parents[3] / "*" / "s*")  # fedavg/s0, fedavg/s1, ... (run roots)
    proc = _run([glob, "--out", "out"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == sorted(
        ["report.md", "report.csv", "report.html"]
        + [f"table{k}_{n}.png" for k in (1, 2) for n in ("metric", "clients", "bytes")]
    )
    assert proc.stdout.startswith("## Table 1: 3 runs, pref_acc\n| group | runs | seeds | metric |")


def test_report_process_bad_input_one_line_exit_2(tmp_path):
    proc = _run(["no_such_run"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.endswith("error: RUN 'no_such_run': no such run folder\n")
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["{empty}"], "RUN '{empty}': no summary.json in it or below it (not a finished run)"),
        (["{broken}"], "{broken}/summary.json: not a readable JSON file (JSONDecodeError)"),
        (
            ["{run}", "--by", "method,federation.nope"],
            "--by 'federation.nope': not in the config of {run}"
            " (fields: method, partition, strategy, model, seed or a dotted config key)",
        ),
        (
            ["{run}", "--metric", "rouge"],
            "--metric 'rouge': not in the final evaluation of {run}"
            " (it has: ['loss', 'pref_acc', 'reward_acc', 'reward_margin'])",
        ),
        (["{run}", "--out", "{file}"], "--out '{file}': a file, not a folder"),
    ],
)
def test_bad_input_names_the_argument_and_value_and_writes_nothing(tiny_runs, tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "summary.json").write_text("{not json")
    (tmp_path / "file").write_text("")
    names = {
        "empty": tmp_path / "empty",
        "broken": tmp_path / "broken",
        "run": tiny_runs["fedavg/s0"],
        "file": tmp_path / "file",
    }
    fill = lambda s: s.format(**{k: str(v) for k, v in names.items()})  # noqa: E731
    before = sorted(tmp_path.iterdir())
    assert console_main(["report", *map(fill, args)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {fill(message)}\n" and captured.out == ""
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    "text, line, what",
    [
        ('{"round": 1, "seconds": 1.0}\n{"round": 2, "secon', 2, "is not JSON (a truncated or damaged file)"),
        ('{"round": 1}\n\n[1, 2]\n', 3, "is not a round record (a JSON object with a round number)"),
    ],
)
def test_a_damaged_rounds_file_is_one_line_naming_the_file_and_line(tmp_path, text, line, what):
    run = make_run(tmp_path / "run")
    (run / "rounds.jsonl").write_text(text)
    proc = _run([str(run), "--out", "out"], cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"error: {run / 'rounds.jsonl'}: line {line} {what}\n"
    assert not (tmp_path / "out").exists()
