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
