"""The federated data module: client DataModules, round layout, and early one-line errors."""

import json
import re

import pytest

from lightning_fed.datamodules import ByKey, InstructionDataModule, PreferenceDataModule
from lightning_fed.modules.backbone import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("bytes")


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)


def prefs(n=8):
    return [
        {"prompt": f"Say something {i}.", "chosen": "Yes indeed.", "rejected": "No thanks.", "topic": i % 2}
        for i in range(n)
    ]


def setup_dm(dm, tokenizer):
    dm.tokenizer = tokenizer
    dm.setup("fit")
    return dm


def test_clients_hold_disjoint_data_and_own_dataloaders(tokenizer):
    dm = setup_dm(
        PreferenceDataModule(num_clients=4, synthetic_args={"num_clients": 4, "examples_per_client": 10}, batch_size=3),
        tokenizer,
    )
    assert dm.client_sizes == [9, 9, 9, 9]  # 10 rows, 1 held out for validation
    for cid in range(4):
        batch = next(iter(dm.client(cid).train_dataloader()))
        assert set(batch["client_id"].tolist()) == {cid}
        assert batch["chosen_input_ids"].shape == batch["rejected_input_ids"].shape
    val_batches = list(dm.val_dataloader())
    assert all(len(set(b["client_id"].tolist())) == 1 for b in val_batches)


def test_instruction_labels_mask_the_prompt(tokenizer):
    dm = setup_dm(
        InstructionDataModule(
            num_clients=2, synthetic_args={"num_clients": 2, "examples_per_client": 4}, max_length=512
        ),
        tokenizer,
    )
    item = dm.client(0).train_set[0]
    scored = [t for t, label in zip(item["input_ids"], item["labels"]) if label != -100]
    text = tokenizer.decode(scored)
    assert "### Response" not in text and text.endswith(tokenizer.eos_token)
    assert tokenizer.decode(item["input_ids"]).startswith("Below is an instruction")


def test_local_file_with_field_map(tmp_path, tokenizer):
    rows = [{"question": r["prompt"], "good": r["chosen"], "bad": r["rejected"]} for r in prefs()]
    path = write_jsonl(tmp_path / "pairs.jsonl", rows)
    dm = PreferenceDataModule(
        path, num_clients=2, field_map={"prompt": "question", "chosen": "good", "rejected": "bad"}, val_fraction=0.0
    )
    assert sum(setup_dm(dm, tokenizer).client_sizes) == 8


@pytest.mark.parametrize(
    "rows, kwargs, message",
    [
        ([{**prefs()[0], "prompt": ""}] + prefs(), {}, "row 0 has an empty 'prompt'"),
        ([{"prompt": "x", "chosen": "y"}] * 4, {}, "missing field 'rejected'"),
        (
            prefs(),
            {"max_length": 12},
            r"data.max_length: row \d+ \(line \d+\) of data.dataset .* \(client \d+\) has \d+ tokens",
        ),
        (prefs(), {"field_map": {"answer": "chosen"}}, "answer"),
        (  # a set the precheck does not read: the data module says the precheck's line (issue 41 M7)
            prefs(),
            {"num_clients": 3, "partition": ByKey("topic")},
            r"^data.partition.key 'topic': data.dataset '.*bad.jsonl' has 2 distinct 'topic' value\(s\) \(0, 1\),"
            r" which cannot fill data.num_clients=3 clients; use num_clients <= 2$",
        ),
    ],
    ids=["empty-prompt", "missing-field", "too-long", "unknown-field", "empty-client"],
)
def test_bad_input_is_a_one_line_error_before_training(tmp_path, tokenizer, rows, kwargs, message):
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    kwargs.setdefault("num_clients", 2)
    with pytest.raises((ValueError, KeyError)) as err:
        setup_dm(PreferenceDataModule(path, **kwargs), tokenizer)
    text = str(err.value)
    assert "\n" not in text
    assert re.search(message, text), text


def test_overflow_truncate_and_drop(tmp_path, tokenizer):
    rows = prefs() + [{"prompt": "long " * 40, "chosen": "Yes indeed.", "rejected": "No thanks."}]
    path = write_jsonl(tmp_path / "mixed.jsonl", rows)
    truncated = setup_dm(
        PreferenceDataModule(path, num_clients=1, max_length=40, on_overflow="truncate", val_fraction=0.0), tokenizer
    )
    assert truncated.client_sizes == [9]
    assert all(len(i["chosen_input_ids"]) <= 40 for i in truncated.client(0).train_set.items)
    dropped = setup_dm(
        PreferenceDataModule(path, num_clients=1, max_length=40, on_overflow="drop", val_fraction=0.0), tokenizer
    )
    assert dropped.client_sizes == [8]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 0}, "data.batch_size must be >= 1, got 0"),
        (
            {"on_overflow": "clip"},
            re.escape("data.on_overflow must be one of ('error', 'truncate', 'drop'), got 'clip'"),
        ),
        ({"val_fraction": 1.5}, r"data.val_fraction must be in \[0, 1\), got 1.5"),
    ],
)
def test_arguments_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PreferenceDataModule(**kwargs)


def test_all_problems_are_reported_together():
    with pytest.raises(ValueError) as err:
        PreferenceDataModule(batch_size=0, max_length=1)
    assert "data.batch_size" in str(err.value) and "data.max_length" in str(err.value)
