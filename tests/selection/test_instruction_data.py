"""Dolly-15K and Natural Instructions as their hub copies lay them out, from local JSONL files.

The files are written here with the hub schemas (Dolly: ``instruction``, ``context``,
``response``, ``category``; ``Muennighoff/natural-instructions``: ``task_name``, ``id``,
``definition``, ``inputs``, ``targets``) and go through the same loader, field maps and
partitioners as a run that names the hub data set.
"""

import json

import numpy as np
import pytest

from lightning_fed.datamodules import ByKey, InstructionDataModule
from lightning_fed.datamodules.instruction_sets import DOLLY_FIELD_MAP, NI_HUB_FIELD_MAP, HeldOutDirichlet
from lightning_fed.datamodules.sources import load_records
from lightning_fed.evaluation.heldout import held_out_examples
from lightning_fed.modules import load_tokenizer

# Dolly-15K's 8 categories; sorted, `summarization` is the last (the authors' code's category 7)
CATEGORIES = [
    "open_qa",
    "general_qa",
    "classification",
    "closed_qa",
    "brainstorming",
    "information_extraction",
    "summarization",
    "creative_writing",
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def dolly(tmp_path):
    rows = [
        {
            "instruction": f"Q{i} ({CATEGORIES[i % 8]})?",
            "context": f"ctx {i}" if i % 3 else "",
            "response": f"A{i}.",
            "category": CATEGORIES[i % 8],
        }
        for i in range(400)
    ]
    return write_jsonl(tmp_path / "dolly.jsonl", rows), rows


def test_dolly_fields_dirichlet_over_categories_and_the_last_category_held_out(dolly):
    path, rows = dolly
    dm = InstructionDataModule(
        dataset=path,
        field_map=DOLLY_FIELD_MAP,
        partition=HeldOutDirichlet(alpha=0.5),
        num_clients=20,
        template="alpaca",
        max_length=512,
        val_fraction=0.0,
        seed=3,
    )
    dm.tokenizer = load_tokenizer("bytes")
    dm.setup()
    # field mapping: context -> input (empty context: no input section), response -> output
    by_text = {r["instruction"]: r for r in rows}
    seen = []
    for c in range(20):
        for item in dm.client(c).full_train:
            text = dm.tokenizer.decode(item["input_ids"], skip_special_tokens=True)
            row = next(r for q, r in by_text.items() if f"### Instruction:\n{q}\n" in text)
            assert text.rstrip().endswith(row["response"]), text
            assert (f"### Input:\n{row['context']}" in text) == bool(row["context"]), text
            seen.append(row)
    # every non-held-out row lands on exactly one client; no summarization row is trained on
    assert len(seen) == len({r["instruction"] for r in seen}) == 350
    assert {r["category"] for r in seen} == set(CATEGORIES) - {"summarization"}
    # Dirichlet(0.5) over categories: clients are category-skewed (a uniform split would give 1/7 each)
    records = load_records(path, "instruction", field_map=DOLLY_FIELD_MAP)
    parts = HeldOutDirichlet(alpha=0.5)(records, 20, seed=3)
    shares = [
        np.bincount([CATEGORIES.index(records[i]["category"]) for i in p], minlength=8).max() / len(p) for p in parts
    ]
    assert np.median(shares) > 0.4, shares
    # the held-out category is the evaluation set, through the same field map
    held = held_out_examples(path, field_map=DOLLY_FIELD_MAP, split="train", where={"category": "summarization"})
    assert len(held) == 50 and all("(summarization)" in e["instruction"] for e in held)
    assert held[1] == {"instruction": "Q14 (summarization)?", "input": "ctx 14", "output": "A14."}
    assert held[0]["input"] == ""  # an empty context is an empty input


def test_natural_instructions_hub_schema_one_task_per_client_and_test_tasks_held_out(tmp_path):
    def rows(tasks, n):
        return [
            {
                "task_name": t,
                "id": f"{t}-{i}",
                "definition": f"Definition of {t}.",
                "inputs": f"input {i} of {t}",
                "targets": f"target {i}",
            }
            for t in tasks
            for i in range(n)
        ]

    train_tasks, test_tasks = ["task001_a", "task002_b", "task003_c"], ["task900_x"]
    train = write_jsonl(tmp_path / "ni_train.jsonl", rows(train_tasks, 12))
    test = write_jsonl(tmp_path / "ni_test.jsonl", rows(test_tasks, 5))
    dm = InstructionDataModule(
        dataset=train,
        field_map=NI_HUB_FIELD_MAP,
        partition=ByKey("task_name"),
        num_clients=3,
        template="alpaca",
        max_length=512,
        val_fraction=0.0,
    )
    dm.tokenizer = load_tokenizer("bytes")
    dm.setup()
    for c, task in enumerate(train_tasks):  # one task per client, sorted by name
        texts = [dm.tokenizer.decode(it["input_ids"], skip_special_tokens=True) for it in dm.client(c).full_train]
        assert len(texts) == 12
        assert all(
            f"### Instruction:\nDefinition of {task}.\n" in t and "### Input:\ninput " in t and f" of {task}" in t
            for t in texts
        )
        assert all(t.rstrip().split("\n")[-1].startswith("target ") for t in texts)
    held = held_out_examples(test, field_map=NI_HUB_FIELD_MAP, split="train")
    assert [e["output"] for e in held] == [f"target {i}" for i in range(5)]
    assert held[0] == {"instruction": "Definition of task900_x.", "input": "input 0 of task900_x", "output": "target 0"}
    with pytest.raises(ValueError, match="answer"):  # a wrong column name fails early and names it
        load_records(
            train, "instruction", field_map={"instruction": "definition", "input": "inputs", "output": "answer"}
        )
