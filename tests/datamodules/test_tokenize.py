"""Prompt and completion budgets: no example is trained or scored without its question (issue 22, item 12)."""

import json
import re

import pytest

from lightning_fed.datamodules import PreferenceDataModule
from lightning_fed.datamodules.tokenize import PromptTooShort, tokenize_preference, tokenize_sft
from lightning_fed.modules.backbone import byte_tokenizer
from lightning_fed.modules.losses import IGNORE_INDEX

QUESTION = "Which planet is the largest one?\n"  # 33 bytes = 33 tokens of the byte tokenizer


def _split(item, prefix=""):
    tok = byte_tokenizer()
    ids, labels = item[f"{prefix}input_ids"], item[f"{prefix}labels"]
    prompt = tok.decode([i for i, label in zip(ids, labels) if label == IGNORE_INDEX])
    response = tok.decode([t for t in labels if t != IGNORE_INDEX], skip_special_tokens=True)
    return prompt, response


def test_a_response_longer_than_max_length_no_longer_leaves_one_prompt_token():
    # 33 prompt tokens + 60 response tokens + eos = 94 > 48: fitting keeps 48 - 61 < 1 -> 1 prompt token
    # before; now fewer than min_prompt_length=16 is refused.
    with pytest.raises(PromptTooShort, match=r"only 1 of its 33 prompt tokens fit \(data.min_prompt_length=16\)"):
        tokenize_sft(QUESTION, "J" * 60, byte_tokenizer(), 48, "truncate", "prompt_left", min_prompt_length=16)


def test_prompt_and_completion_budgets_keep_the_prompt_end_and_the_response_start():
    # TRL: prompt -> its last max_prompt_length tokens, completion -> its first max_completion_length.
    item = tokenize_sft(
        QUESTION,
        "Jupiter, by far.",
        byte_tokenizer(),
        64,
        "error",
        max_prompt_length=20,
        max_completion_length=8,
        min_prompt_length=16,
    )
    assert _split(item) == (QUESTION[-20:], "Jupiter,")
    assert len(item["input_ids"]) == 28


def test_budgets_then_max_length_and_the_loss_of_most_of_a_prompt_is_reported():
    lost, cut = [], []
    # 33 + (30 + eos) = 64 > 50: prompt_left keeps 50 - 31 = 19 of 33 prompt tokens (>= 16, < half? no: 19 > 16.5)
    item = tokenize_sft(
        QUESTION, "J" * 30, byte_tokenizer(), 50, "truncate", on_truncate=lambda: cut.append(1), min_prompt_length=16
    )
    assert _split(item) == (QUESTION[-19:], "J" * 30) and cut == [1]
    # max_length 47 keeps 16 of 33 (< half): kept, and reported as having lost most of its prompt
    item = tokenize_sft(
        QUESTION,
        "J" * 30,
        byte_tokenizer(),
        47,
        "truncate",
        min_prompt_length=16,
        on_prompt_loss=lambda: lost.append(1),
    )
    assert _split(item)[0] == QUESTION[-16:] and lost == [1]


def test_a_pair_is_refused_when_either_response_leaves_too_little_prompt():
    tok = byte_tokenizer()
    short = tokenize_preference(QUESTION, "Jupiter.", "Mars.", tok, 48, "truncate", min_prompt_length=16)
    assert _split(short, "chosen_")[0] == QUESTION and _split(short, "rejected_")[0] == QUESTION
    with pytest.raises(PromptTooShort):
        tokenize_preference(QUESTION, "Jupiter.", "M" * 40, tok, 48, "truncate", min_prompt_length=16)


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_the_data_module_drops_and_counts_pairs_that_would_lose_their_prompt(tmp_path):
    rows = [{"prompt": QUESTION, "chosen": "Jupiter.", "rejected": "Mars."}] * 3
    rows += [{"prompt": QUESTION, "chosen": "J" * 60, "rejected": "Mars."}]  # only 1 prompt token would fit 48
    rows += [{"prompt": QUESTION, "chosen": "J" * 30, "rejected": "Mars."}] * 2  # keeps 16 of 33 tokens of 47
    dm = PreferenceDataModule(
        _write(tmp_path / "p.jsonl", rows), num_clients=1, max_length=47, on_overflow="truncate", val_fraction=0.0
    )
    dm.tokenizer = byte_tokenizer()
    with pytest.warns(UserWarning) as record:
        dm.setup("fit")
    text = [str(w.message) for w in record]
    assert (
        "data: 1 train examples dropped: fewer than data.min_prompt_length=16 of their prompt tokens fit"
        " data.max_length=47 (set data.max_completion_length or raise data.max_length); per client: [1]" in text
    )
    assert (
        "data: 2 of 2 truncated train examples lost most of their prompt (kept under half its tokens;"
        " set data.max_completion_length or raise data.max_length); per client: [2]" in text
    )
    assert dm.client_sizes == [5]
    report = dm.data_report()
    assert report["prompt_dropped"] == {"train": [1]} and report["prompt_lost"] == {"train": [2]}
    budget = PreferenceDataModule(
        _write(tmp_path / "p.jsonl", rows),
        num_clients=1,
        max_length=47,
        on_overflow="truncate",
        max_completion_length=12,
        val_fraction=0.0,
    )
    budget.tokenizer = byte_tokenizer()
    budget.setup("fit")
    assert budget.client_sizes == [6] and budget.data_report()["prompt_dropped"] == {"train": [0]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_prompt_length": 0}, "data.max_prompt_length must be in [1, data.max_length=64), got 0"),
        ({"max_completion_length": 64}, "data.max_completion_length must be in [1, data.max_length=64), got 64"),
        ({"min_prompt_length": 0}, "data.min_prompt_length must be in [1, data.max_length=64), got 0"),
        (
            {"min_prompt_length": 64, "on_overflow": "truncate"},
            "data.min_prompt_length must be in [1, data.max_length=64), got 64",
        ),
        (
            {"min_prompt_length": 20, "max_prompt_length": 10},
            "data.min_prompt_length=20 must be <= data.max_prompt_length=10",
        ),
    ],
)
def test_budgets_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        PreferenceDataModule(max_length=64, **kwargs)
