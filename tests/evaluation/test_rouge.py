"""ROUGE (rouge-score, no nltk data), greedy generation, and the held-out ROUGE hook."""

import json

import pytest
import torch

from lightning_fed.evaluation.generation import generate_responses
from lightning_fed.evaluation.heldout import HeldOutRouge, held_out_examples
from lightning_fed.evaluation.rouge import rouge_per_example, rouge_scores


def test_rouge_values_worked_out_by_hand():
    assert rouge_scores(["the cat sat"], ["the cat sat"]) == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}
    assert rouge_scores(["dog"], ["the cat sat"])["rougeL"] == 0.0
    # LCS("a b c d", "a c d e") = "a c d": P = R = 3/4
    assert rouge_scores(["a c d e"], ["a b c d"])["rougeL"] == pytest.approx(0.75)
    # case and punctuation are ignored by rouge-score's tokenizer
    assert rouge_per_example(["HOUSE, TIGER!"], ["house tiger"], ["rougeL"])["rougeL"] == [1.0]


def test_rouge_rejects_types_that_need_nltk_data_and_mismatched_lengths():
    with pytest.raises(ValueError, match="rougeLsum needs nltk punkt"):
        rouge_scores(["a"], ["a"], types=["rougeLsum"])
    with pytest.raises(ValueError, match="2 predictions for 1 references"):
        rouge_scores(["a", "b"], ["a"])


def _tiny():
    from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule
    from tests.helpers.runs import TINY_GPT2

    torch.manual_seed(0)
    return SFTModule(
        BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"), lora=LoraSettings(r=4, alpha=8, dropout=0.0)
    )


def test_greedy_generation_is_deterministic_bounded_and_restores_the_mode():
    module = _tiny()
    module.train()
    prompts = ["Copy the last word.\nhouse tiger\n", "Count the words.\na b c\n", "Copy the last word.\nhouse tigre\n"]
    first = generate_responses(module.model, module.tokenizer, prompts, max_new_tokens=6, batch_size=2)
    assert first == generate_responses(module.model, module.tokenizer, prompts, max_new_tokens=6)
    assert len(first) == 3 and all(len(a.encode()) <= 6 for a in first)
    assert module.training
    with pytest.raises(ValueError, match="`max_new_tokens` must be >= 1"):
        generate_responses(module.model, module.tokenizer, prompts, max_new_tokens=0)


def test_held_out_examples_filter_and_subsample(tmp_path):
    path = tmp_path / "dolly.jsonl"
    rows = [
        {
            "instruction": f"q{i}",
            "context": "",
            "response": f"a{i}",
            "category": "summarization" if i % 2 else "open_qa",
        }
        for i in range(10)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    fmap = {"input": "context", "output": "response"}
    got = held_out_examples(str(path), field_map=fmap, where={"category": "summarization"}, max_examples=3)
    assert len(got) == 3 and all(int(e["instruction"][1:]) % 2 == 1 for e in got)
    with pytest.raises(ValueError, match="no column 'task'"):
        held_out_examples(str(path), field_map=fmap, where={"task": "x"})


def test_hook_logs_rouge_after_aggregation(tmp_path):
    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.datamodules import InstructionDataModule
    from tests.helpers.runs import fit

    module = _tiny()
    args = {"num_clients": 2, "examples_per_client": 8, "families": ["last_word"], "families_per_client": 1}
    data = InstructionDataModule(num_clients=2, synthetic_args=args, template="plain", batch_size=4, max_length=128)
    hook = HeldOutRouge(
        synthetic_args={
            "num_clients": 1,
            "examples_per_client": 4,
            "families": ["capitalize"],
            "families_per_client": 1,
        },
        max_new_tokens=4,
        every_n_rounds=2,
    )
    fit(module, data, FederatedLoop(rounds=3, clients_per_round=1, local_steps=1, hooks=[hook]), str(tmp_path))
    assert [r["round"] for r in hook.history] == [2, 3]  # every 2nd round and the last
    assert set(hook.history[0]) >= {"rouge1", "rouge2", "rougeL"}
    assert json.loads((tmp_path / "rouge.json").read_text())[-1]["round"] == 3
