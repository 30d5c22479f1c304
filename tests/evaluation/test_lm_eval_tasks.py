"""lm-evaluation-harness on the in-memory adapted model: local task definitions, offline."""

import json

import pytest
import torch

from lightning_fed.evaluation.lm_eval_tasks import LmEvalOptions, make_lm, run_lm_eval, scalars, task_manager
from tests.evaluation.eval_runs import make_run

QUESTIONS = [
    "What is 2 plus 2?",
    "Name a colour.",
    "Is ice cold?",
    "Which is a fruit?",
    "What is 3 times 3?",
    "Pick a day.",
]
CHOICES = [
    ["4", "5", "22"],
    ["red", "cat", "seven"],
    ["yes", "no", "maybe"],
    ["apple", "stone", "car"],
    ["9", "6", "33"],
    ["Monday", "blue", "ten"],
]


def _continuation_logprob(model, tokenizer, context: str, continuation: str) -> float:
    ctx = tokenizer(context, add_special_tokens=False)["input_ids"]
    cont = tokenizer(continuation, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([ctx + cont])
    with torch.no_grad():
        logp = model(ids).logits.log_softmax(-1)[0, len(ctx) - 1 : -1]
    return float(logp.gather(-1, torch.tensor(cont)[:, None]).sum())


def _user_task(tmp_path, labels):
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(json.dumps({"q": q, "choices": c, "label": l}) + "\n" for q, c, l in zip(QUESTIONS, CHOICES, labels))
    )
    name = "user_mc_" + "".join(map(str, labels))
    (tmp_path / f"{name}.yaml").write_text(
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\ntest_split: test\n"
        'output_type: multiple_choice\ndoc_to_text: "Q: {{q}}\\nA:"\n'
        'doc_to_choice: "{{choices}}"\ndoc_to_target: label\nmetric_list:\n  - metric: acc\n'
    )
    return tmp_path / f"{name}.yaml"


@pytest.fixture(scope="module")
def run_model(tmp_path_factory):
    module = make_run(tmp_path_factory.mktemp("run"), seed=5)
    return module.model, module.tokenizer


def test_user_task_scores_the_adapted_model(run_model, tmp_path):
    """Labels set to the adapted model's own most (least) likely choice give acc 1 (0): lm-eval
    scored this model, adapter applied, on a task defined in a local YAML + JSONL."""
    model, tokenizer = run_model
    scores = [
        [_continuation_logprob(model, tokenizer, f"Q: {q}\nA:", " " + c) for c in cs]
        for q, cs in zip(QUESTIONS, CHOICES)
    ]
    best = [max(range(3), key=s.__getitem__) for s in scores]
    worst = [min(range(3), key=s.__getitem__) for s in scores]
    lm = make_lm(model, tokenizer, batch_size=4)
    for labels, expected in ((best, 1.0), (worst, 0.0)):
        (tmp_path / str(expected)).mkdir()
        path = _user_task(tmp_path / str(expected), labels)
        options = LmEvalOptions(tasks=[str(path)], bootstrap_iters=0)
        manager, names = task_manager(options)
        result = run_lm_eval(lm, options, manager, names)
        assert result["results"][names[0]]["acc,none"] == expected
        assert result["n_samples"][names[0]]["effective"] == len(QUESTIONS)


def test_shipped_local_tasks(run_model):
    model, tokenizer = run_model
    options = LmEvalOptions(tasks=["lf_arithmetic_mc", "lf_arithmetic_gen"], limit=4)
    manager, names = task_manager(options)
    result = run_lm_eval(make_lm(model, tokenizer, batch_size=4), options, manager, names)
    mc, gen = result["results"]["lf_arithmetic_mc"], result["results"]["lf_arithmetic_gen"]
    assert 0.0 <= mc["acc,none"] <= 1.0 and "acc_norm,none" in mc and "acc_stderr,none" in mc
    assert "exact_match,strip" in gen
    assert result["n_samples"]["lf_arithmetic_mc"] == {"original": 60, "effective": 4}
    assert scalars(result)["lm_eval/lf_arithmetic_mc/acc/none"] == mc["acc,none"]


def test_options_and_task_files_are_checked(tmp_path):
    with pytest.raises(ValueError, match=r"--lm_eval.limit must be a count >= 1 or a fraction in \(0, 1\), got 1.5"):
        LmEvalOptions(tasks=["x"], limit=1.5)
    with pytest.raises(ValueError, match="--lm_eval.tasks is empty"):
        task_manager(LmEvalOptions())
    with pytest.raises(ValueError, match=r"--lm_eval.tasks: task file '/no/task.yaml' does not exist"):
        task_manager(LmEvalOptions(tasks=["/no/task.yaml"]))
    (tmp_path / "t.yaml").write_text("dataset_path: json\n")
    with pytest.raises(ValueError, match="has no 'task' name"):
        task_manager(LmEvalOptions(tasks=[str(tmp_path / "t.yaml")]))
