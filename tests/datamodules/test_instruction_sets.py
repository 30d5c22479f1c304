"""Dolly-15K and Natural Instructions loading, on local files shaped like them."""

import json

import pytest

from lightning_fed.datamodules import ByKey, InstructionDataModule
from lightning_fed.datamodules.instruction_sets import DOLLY_FIELD_MAP, HeldOutDirichlet, prepare_natural_instructions
from lightning_fed.datamodules.sources import load_records

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


@pytest.fixture
def dolly(tmp_path):
    path = tmp_path / "databricks-dolly-15k.jsonl"
    rows = [
        {
            "instruction": f"Question {i}?",
            "context": "Some context." if i % 3 else "",
            "response": f"Answer {i}.",
            "category": CATEGORIES[i % 8],
        }
        for i in range(160)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_dolly_holds_out_the_last_category_and_splits_the_rest_by_dirichlet(dolly):
    records = load_records(dolly, "instruction", field_map=DOLLY_FIELD_MAP)
    partition = HeldOutDirichlet(alpha=0.5, key="category")
    assert partition.held_out_values(records) == ["summarization"]  # last in sorted order
    parts = partition(records, 10, seed=0)
    assert len(parts) == 10 and all(parts)
    assigned = sorted(i for p in parts for i in p)
    assert len(assigned) == len(set(assigned)) == 140
    assert all(records[i]["category"] != "summarization" for i in assigned)
    assert parts == partition(records, 10, seed=0)  # seeded
    with pytest.raises(ValueError, match="held_out values \\['poetry'\\]"):
        HeldOutDirichlet(alpha=0.5, held_out=["poetry"])(records, 10, seed=0)


def test_dolly_through_the_data_module(dolly):
    from lightning_fed.modules import load_tokenizer

    dm = InstructionDataModule(
        dataset=dolly,
        field_map=DOLLY_FIELD_MAP,
        partition=HeldOutDirichlet(alpha=5.0),
        num_clients=8,
        max_length=256,
        val_fraction=0.0,
    )
    dm.tokenizer = load_tokenizer("bytes")
    dm.setup()
    assert sum(dm.client_sizes) == 140


def _task(root, name, n):
    (root / "tasks" / f"{name}.json").write_text(
        json.dumps(
            {
                "Definition": [f"Do task {name}."],
                "Instances": [
                    {"id": f"{name}-{i}", "input": f"input {i} of {name}", "output": [f"output {i}", "alt"]}
                    for i in range(n)
                ],
            }
        )
    )


@pytest.fixture
def natural_instructions(tmp_path):
    root = tmp_path / "natural-instructions"
    (root / "tasks").mkdir(parents=True)
    (root / "splits" / "default").mkdir(parents=True)
    train = {"task001_a": 100, "task002_b": 50, "task003_small": 10}
    test = {"task900_c": 300, "task901_d": 15}
    for name, n in {**train, **test}.items():
        _task(root, name, n)
    (root / "splits" / "default" / "train_tasks.txt").write_text("\n".join(train) + "\n")
    (root / "splits" / "default" / "test_tasks.txt").write_text("\n".join(test) + "\n")
    return root


def test_natural_instructions_one_task_per_client_with_held_out_test_tasks(natural_instructions, tmp_path):
    counts = prepare_natural_instructions(natural_instructions, tmp_path / "ni")
    # 20% of each training task with >= 20 instances; 2% (at least 20, at most all) of each test task
    assert counts == {"train_tasks": 2, "train_rows": 20 + 10, "test_tasks": 2, "test_rows": 20 + 15}
    train = load_records(str(tmp_path / "ni" / "train.jsonl"), "instruction")
    assert set(train["task"]) == {"task001_a", "task002_b"}
    assert train[0]["instruction"] == "Do task task001_a." and train[0]["output"].startswith("output ")
    parts = ByKey("task")(train, 2, seed=0)
    assert [len(p) for p in parts] == [20, 10]
    test = load_records(str(tmp_path / "ni" / "test.jsonl"), "instruction")
    assert set(test["task"]) == {"task900_c", "task901_d"}


def test_natural_instructions_errors_name_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_tasks.txt"):
        prepare_natural_instructions(tmp_path, tmp_path / "out")
