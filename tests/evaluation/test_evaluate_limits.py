"""``lightning-fed evaluate`` fails early, names the option, and keeps what it computed (issue 41 item 5).

Before: on a model of 256 positions HumanEval's default 256 new tokens failed inside lm-eval's
generation (exit 1, ``requested max tokens to generate (256) must be less than model's maximum
sequence length (256)``, no option named) after the multiple-choice task had run, whose results
were thrown away; an adapter with ``lora_alpha: 1e300`` was evaluated (``fit`` caps it at 1e6).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.evaluation.eval_runs import make_run
from tests.evaluation.test_evaluate_cli import ENV, ROOT

PROG = "error: "
MC = ["--lm_eval.tasks", "[lf_arithmetic_mc]", "--lm_eval.limit", "2"]


def _evaluate(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lightning_fed.cli", "evaluate", *args]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("evaluate_limits") / "version_0"
    make_run(root)  # a tiny GPT-2 of 256 positions with its adapter, as fit leaves it
    return root


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "version_0"
    for rel, data in _files(run).items():
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (copy / rel).write_bytes(data)
    return copy


def test_a_generation_length_past_the_model_is_refused_before_any_benchmark_runs(run, tmp_path):
    run = _copy(run, tmp_path)
    before = _files(run)
    proc = _evaluate("--run", str(run), "--benchmarks", "[lm_eval,humaneval]", *MC, "--humaneval.limit", "1")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        PROG + "--humaneval.max_new_tokens 256 must be less than the model's maximum sequence length 256"
        " (its config's positions, or --lm_eval.max_length): the prompt needs room;"
        " e.g. --humaneval.max_new_tokens 128\n"
    ), proc.stderr[-3000:]
    assert _files(run) == before  # no eval_results.json, no eval/ folder


def test_the_judge_answer_length_is_checked_against_lm_eval_max_length(run, tmp_path, capsys):
    from lightning_fed.evaluation.cli import main

    run = _copy(run, tmp_path)
    before = _files(run)
    args = ["--run", str(run), "--benchmarks", "[lm_eval,judge]", *MC, "--lm_eval.max_length", "64"]
    args += ["--judge.url", "http://127.0.0.1:9/v1", "--judge.model", "m", "--judge.max_new_tokens", "64"]
    assert main(args) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        PROG + "--judge.max_new_tokens 64 must be less than the model's maximum sequence length 64"
        " (--lm_eval.max_length): the prompt needs room; e.g. --judge.max_new_tokens 32"
    )
    assert _files(run) == before


def test_a_later_benchmark_that_fails_keeps_the_results_of_the_earlier_ones(run, tmp_path):
    """The judge's endpoint refuses the connection after lm-eval has scored: exit 1, lm-eval's
    results written, and the error says where."""
    run = _copy(run, tmp_path)
    judge = ["--judge.url", "http://127.0.0.1:9/v1", "--judge.model", "m", "--judge.limit", "1"]
    proc = _evaluate("--run", str(run), "--benchmarks", "[lm_eval,judge]", *MC, *judge, "--judge.max_new_tokens", "4")
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith(PROG)]
    assert len(errors) == 1 and errors[0].startswith(
        PROG + "--benchmarks judge: RuntimeError: --judge.url http://127.0.0.1:9/v1/chat/completions: "
    )
    assert errors[0].endswith(f"; the results of lm_eval are kept in {run / 'eval_results.json'}"), errors
    kept = json.loads((run / "eval_results.json").read_text())
    assert set(kept) == {"lm_eval", "model", "updated"}
    assert kept["lm_eval"]["n_samples"]["lf_arithmetic_mc"]["effective"] == 2
    assert "acc,none" in kept["lm_eval"]["results"]["lf_arithmetic_mc"]


def test_an_adapter_alpha_past_fits_bound_is_refused(run, tmp_path):
    run = _copy(run, tmp_path)
    config_path = run / "adapter" / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["lora_alpha"] = 1e300
    config_path.write_text(json.dumps(config))
    before = _files(run)
    proc = _evaluate("--run", str(run), "--benchmarks", "[lm_eval]", *MC)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        PROG + f"--run {str(config_path)!r}: 'lora_alpha' must be in (0, 1000000.0], got 1e+300\n"
    ), proc.stderr[-3000:]
    assert _files(run) == before
