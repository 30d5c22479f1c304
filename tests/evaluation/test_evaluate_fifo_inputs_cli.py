"""An input file of ``evaluate`` that is there but no regular file (a FIFO, a folder) is named as what it
is, never opened, before torch and any model (red team 17 B17).

On 75a286d a FIFO given as ``--judge.prompts`` was ``error: --judge.prompts 'p.jsonl': no such file`` (a
file that ``ls`` shows), and one given in ``--lm_eval.tasks`` was ``error: --lm_eval.tasks: task file
'task.yaml' does not exist`` after the model was loaded (20 s). The model named here cannot be loaded
offline, and the children cannot import torch (tests/helpers/cli.py): a line about either would mean
they came first. Each child runs in an empty folder, which stays empty, and writes no ``--output``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.cli import lightning_fed_without_torch

JUDGE = ["--benchmarks", "[judge]", "--judge.url", "http://127.0.0.1:9", "--judge.model", "m", "--judge.prompts"]
CASES = {
    "judge_prompts": (JUDGE, "{path}", "--judge.prompts '{path}'"),
    "lm_eval_task": (
        ["--benchmarks", "[lm_eval]", "--lm_eval.tasks"],
        "[{path}]",
        "--lm_eval.tasks: task file '{path}'",
    ),
    "humaneval_problems": (["--benchmarks", "[humaneval]", "--humaneval.problem_file"], "{path}", None),
}


def _fifo(path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(path)


def _evaluate(tmp_path: Path, *args: str):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    model = ["--model", "no-such-org/no-such-model", "--output", str(tmp_path / "out")]
    proc = lightning_fed_without_torch("evaluate", *model, *args, cwd=cwd, hook=tmp_path / "hook")
    assert list(cwd.iterdir()) == [] and not (tmp_path / "out").exists()
    return proc


@pytest.mark.parametrize(("make", "kind"), [(_fifo, "a FIFO"), (Path.mkdir, "a folder")])
@pytest.mark.parametrize("case", list(CASES))
def test_an_input_file_that_is_no_regular_file_is_named_as_what_it_is(tmp_path, case, make, kind):
    before, value, named = CASES[case]
    path = tmp_path / ("task.yaml" if case == "lm_eval_task" else "p.jsonl")
    make(path)
    proc = _evaluate(tmp_path, *before, value.format(path=path))
    named = (named or f"{before[-1]} '{{path}}'").format(path=path)
    assert (proc.returncode, proc.stderr) == (2, f"error: {named} is {kind}, not a regular file\n")


def test_a_missing_task_file_is_said_before_the_model(tmp_path):
    proc = _evaluate(tmp_path, "--benchmarks", "[lm_eval]", "--lm_eval.tasks", f"[{tmp_path / 'no.yaml'}]")
    line = f"--lm_eval.tasks: task file '{tmp_path / 'no.yaml'}' does not exist"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
