"""``lightning-fed evaluate`` as a user runs it: a subprocess, its exit code, output and files."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_fed.errors import help_tip
from lightning_fed.evaluation.cli import PROG
from tests.evaluation.eval_runs import make_run
from tests.evaluation.judge_server import REFERENCE, StubJudgeServer

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def evaluate(*args: str, env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", "evaluate", *args],  # what `lightning-fed evaluate` runs
        cwd=ROOT,
        env=env or ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_bad_input_is_one_line_before_any_model_is_loaded(tmp_path, capsys):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "fine"}\n{"question": "no prompt field"}\n')
    # A model name that cannot be loaded offline: an error about it would mean the model came first.
    proc = evaluate(
        "--model",
        "no-such-org/no-such-model",
        "--output",
        str(tmp_path),
        "--benchmarks",
        "[humaneval,judge]",
        "--humaneval.limit",
        "0",
        "--judge.url",
        "ftp://x",
        "--judge.model",
        "m",
    )
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    assert (
        "--humaneval.limit must be >= 1, got 0" in errors[0]
        and "--judge.url must start with http:// or https://, got 'ftp://x'" in errors[0]
    )

    # The rest in-process (same code path, no second interpreter start-up).
    from lightning_fed.evaluation.cli import main

    args = [
        "--model",
        "no-such-org/no-such-model",
        "--output",
        str(tmp_path),
        "--judge.url",
        "http://127.0.0.1:9",
        "--judge.model",
        "m",
    ]
    cases = [
        (
            ["--benchmarks", "[judge]", "--judge.prompts", str(prompts)],
            f"--judge.prompts {str(prompts)!r} line 2: needs a non-empty string 'prompt'",
        ),
        (
            ["--benchmarks", "[judge]", "--judge.modes", "[pairwise]"],
            "--judge.modes pairwise: the prompts have no 'reference' and --model has no --adapter to compare against",
        ),
        (
            ["--benchmarks", "[lm_eval]", "--lm_eval.tasks", "[/no/task.yaml]"],
            "--lm_eval.tasks: task file '/no/task.yaml' does not exist",
        ),
        (["--benchmarks", "[humaneval]", "--humaneval.limit", "many"], "--humaneval.limit: invalid value 'many'"),
        (
            ["--benchmarks", "[bleu]"],
            "--benchmarks must be a non-empty list of ['lm_eval', 'humaneval', 'judge'], got ['bleu']",
        ),
    ]
    for extra, message in cases:
        assert main(args + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == f"error: {message}" or err[-2:] == [f"error: {message}", help_tip(PROG)], err


def test_run_on_a_local_task_humaneval_and_an_endpoint_judge(tmp_path):
    # The run was trained with data.template=chat and a system turn: the judge's questions reach
    # the model in that chat format, and lm-eval applies the same chat template and system prompt.
    run = tmp_path / "version_0"
    make_run(run, seed=3, data_args={"template": "chat", "system_prompt": "Be brief."})
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps({"prompt": f"Say something about {t}.", "reference": REFERENCE}) + "\n" for t in ("cats", "rain")
        )
    )
    env = {**ENV, "LF_JUDGE_KEY": "sk-local"}
    with StubJudgeServer() as server:
        proc = evaluate(
            "--run",
            str(run),
            "--benchmarks",
            "[lm_eval,humaneval,judge]",
            "--batch_size",
            "4",
            "--lm_eval.tasks",
            "[lf_arithmetic_mc]",
            "--lm_eval.limit",
            "5",
            "--humaneval.limit",
            "2",
            "--humaneval.max_new_tokens",
            "16",
            "--judge.prompts",
            str(prompts),
            "--judge.url",
            server.url,
            "--judge.model",
            "stub-judge",
            "--judge.api_key_env",
            "LF_JUDGE_KEY",
            "--judge.max_new_tokens",
            "8",
            env=env,
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((run / "eval_results.json").read_text())
    assert set(results) >= {"lm_eval", "humaneval", "judge", "model"}
    acc = results["lm_eval"]["results"]["lf_arithmetic_mc"]["acc,none"]
    assert results["lm_eval"]["n_samples"]["lf_arithmetic_mc"]["effective"] == 5
    assert results["humaneval"]["n_problems"] == 2 and results["humaneval"]["pass@1"] == 0.0
    # The stub judge prefers whatever is not the reference, in both orders: 2 wins of 2; grades 7.
    assert results["judge"]["pairwise"] == {
        "win_rate": 1.0,
        "wins": 2,
        "ties": 0,
        "losses": 0,
        "total": 2,
        "against": "reference",
    }
    assert results["judge"]["single"] == {"score": 7.0, "n_rated": 2, "n_unparsed": 0}
    assert len(server.requests) == 6 and all(h["Authorization"] == "Bearer sk-local" for h in server.headers)
    assert results["model"]["seed"] == 3 and results["model"]["adapter"].endswith("adapter")
    lines = proc.stdout.splitlines()
    assert f"lm_eval lf_arithmetic_mc: acc,none={acc:.4f}" in lines[0]
    assert "humaneval pass@1=0.0000 (0/2)" in lines
    assert lines[-1] == f"results: {run / 'eval_results.json'}"
    assert (run / "eval" / "humaneval_samples.jsonl_results.jsonl").is_file()
    judged = [json.loads(x) for x in (run / "eval" / "judge_samples.jsonl").read_text().splitlines()]
    assert [j["prompt"] for j in judged[:2]] == ["Say something about cats.", "Say something about rain."]
    assert judged[0]["model_prompt"] == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay something about cats.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert results["judge"]["template"] == "chat" and results["judge"]["system_prompt"] == "Be brief."
    assert results["lm_eval"]["settings"] == {
        "num_fewshot": None,
        "limit": 5,
        "apply_chat_template": True,
        "system_instruction": "Be brief.",
    }

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "eval"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {
        "eval/humaneval/pass@1",
        "eval/judge/pairwise/win_rate",
        "eval/judge/single/score",
        "eval/lm_eval/lf_arithmetic_mc/acc/none",
    } <= set(tags)
    assert events.Scalars("eval/lm_eval/lf_arithmetic_mc/acc/none")[0].value == pytest.approx(acc)

    # A second evaluation of the same run adds its benchmark and keeps the others.
    proc = evaluate(
        "--run",
        str(run / "checkpoints" / "last.ckpt"),
        "--benchmarks",
        "[humaneval]",
        "--humaneval.limit",
        "1",
        "--humaneval.max_new_tokens",
        "4",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads((run / "eval_results.json").read_text())
    assert (
        again["humaneval"]["n_problems"] == 1
        and again["lm_eval"] == results["lm_eval"]
        and again["judge"] == results["judge"]
    )


NOISE = (
    "fatal: not a git repository",  # lm-eval runs `git describe` in the working folder
    "`pretrained` model kwarg is not of type `str`",  # the model is ours, built in memory
    "Passed an already-initialized model through `pretrained`",
    "Custom kwargs can be passed to `--metadata`",  # an lm-eval console flag this CLI does not have
    "--metadata=",
)


def test_outside_a_git_checkout_lm_eval_prints_none_of_its_notices(tmp_path):
    run = tmp_path / "version_0"
    make_run(run, seed=3)
    elsewhere = tmp_path / "elsewhere"  # under the temporary folder: no git checkout above it
    elsewhere.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", "evaluate", "--run", str(run), "--benchmarks", "[lm_eval]"]
        + ["--lm_eval.tasks", "[lf_arithmetic_mc]", "--lm_eval.limit", "2", "--batch_size", "2"],
        cwd=elsewhere,
        env={**ENV, "PYTHONPATH": str(ROOT), "GIT_CEILING_DIRECTORIES": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [n for n in NOISE if n in proc.stderr] == [], proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == f"results: {run / 'eval_results.json'}"


def test_the_lm_eval_notice_filter_drops_those_notices_only():
    import logging

    from lightning_fed.evaluation.lm_eval_tasks import DropLmEvalNotices

    def record(msg: str, level: int = logging.WARNING) -> logging.LogRecord:
        return logging.LogRecord("lm_eval.api.task", level, __file__, 1, msg, None, None)

    drop = DropLmEvalNotices()
    assert not drop.filter(record("lf_arithmetic_mc: Custom kwargs can be passed to `--metadata` in console"))
    assert not drop.filter(record("Passed an already-initialized model through `pretrained`, assuming ..."))
    assert drop.filter(record("[Task: gsm8k] metric exact_match is defined, but aggregation is not."))
    assert drop.filter(record("Custom kwargs can be passed to `--metadata`", logging.ERROR))  # errors always show
