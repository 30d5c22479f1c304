"""Separate validation/test files assigned to the training clients; truncation policies; test metrics."""

import json
import re
from types import SimpleNamespace

import pytest
import torch

from lightning_fed.datamodules import ByKey, InstructionDataModule, PreferenceDataModule
from lightning_fed.datamodules.tokenize import PadCollator, tokenize_sft
from lightning_fed.evaluation.test_step import extra_metrics, preference_metrics
from lightning_fed.modules.backbone import byte_tokenizer
from lightning_fed.modules.losses import IGNORE_INDEX


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def pairs(users, n, tag):
    return [
        {"user": u, "prompt": f"{tag} {u} {i}?", "chosen": "yes", "rejected": "no"} for u in users for i in range(n)
    ]


def test_test_and_val_files_go_to_the_training_clients_by_key(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", pairs(["ann", "bob", "cyd"], 4, "train"))
    test = write_jsonl(tmp_path / "test.jsonl", pairs(["cyd", "ann"], 2, "test"))
    val = write_jsonl(tmp_path / "val.jsonl", pairs(["bob"], 3, "val"))
    dm = PreferenceDataModule(
        train,
        num_clients=3,
        partition=ByKey("user"),
        test_dataset=test,
        val_dataset=val,
        group_key="user",
        batch_size=2,
    )
    dm.tokenizer = byte_tokenizer()
    dm.setup("test")
    # ByKey: sorted values -> clients (ann 0, bob 1, cyd 2); a val file replaces val_fraction.
    assert dm.client_sizes == [4, 4, 4]
    assert [len(c.test_set) for c in dm.clients] == [2, 0, 2] and [len(c.val_set) for c in dm.clients] == [0, 3, 0]
    decode = dm.tokenizer.decode
    for cid, user in ((0, "ann"), (2, "cyd")):
        assert all(
            decode(item["chosen_input_ids"]).startswith(f"test {user} ") for item in dm.client(cid).test_set.items
        )
    batches = list(dm.test_dataloader())
    assert [b["client_id"].tolist() for b in batches] == [[0, 0], [2, 2]]
    assert [dm.group_names[g] for b in batches for g in b["group_id"].tolist()] == ["ann", "ann", "cyd", "cyd"]

    unseen = write_jsonl(tmp_path / "unseen.jsonl", pairs(["zed"], 1, "test"))
    bad = PreferenceDataModule(train, num_clients=3, partition=ByKey("user"), test_dataset=unseen)
    bad.tokenizer = byte_tokenizer()
    with pytest.raises(
        ValueError,
        match=rf"data.test_dataset '{re.escape(unseen)}': line 1 \(row 0\) has user 'zed', "
        r"which no training client holds \(training values: 'ann', 'bob', 'cyd'\)",
    ):
        bad.setup("test")
    without = PreferenceDataModule(train, num_clients=3, partition=ByKey("user"))
    without.tokenizer = byte_tokenizer()
    with pytest.raises(ValueError, match=r"data.test_dataset is not set.*--data.init_args.test_dataset=<file>"):
        without.setup("test")


def test_synthetic_test_set_is_a_fresh_draw_with_the_client_column():
    dm = PreferenceDataModule(
        num_clients=2, synthetic_args={"examples_per_client": 6}, test_dataset="synthetic:preferences", val_fraction=0.0
    )
    dm.tokenizer = byte_tokenizer()
    dm.setup("test")
    train = {tuple(i["chosen_input_ids"]) for c in dm.clients for i in c.full_train}
    test = [tuple(i["chosen_input_ids"]) for c in dm.clients for i in c.test_set.items]
    assert [len(c.test_set) for c in dm.clients] == [6, 6] and not train & set(test)


@pytest.mark.parametrize(
    ("truncation", "starts", "ends", "response"),
    [
        ("prompt_left", False, True, "RESPONSE"),
        ("prompt_middle", True, True, "RESPONSE"),
        ("response", True, True, "RESPO"),
    ],
)
def test_truncation_keeps_what_the_user_chose(truncation, starts, ends, response):
    tok = byte_tokenizer()
    prompt = "TASK: do this. " + "x" * 40 + " END\n"
    limit = 30 if truncation != "response" else len(prompt) + 5
    cut = []
    item = tokenize_sft(prompt, "RESPONSE", tok, limit, "truncate", truncation, lambda: cut.append(1))
    kept_prompt = tok.decode([i for i, label in zip(item["input_ids"], item["labels"]) if label == IGNORE_INDEX])
    scored = tok.decode([t for t in item["labels"] if t != IGNORE_INDEX], skip_special_tokens=True)
    assert len(item["input_ids"]) == limit and cut == [1]
    assert kept_prompt.startswith("TASK:") == starts and kept_prompt.endswith(" END\n") == ends
    assert scored == response


def test_truncated_examples_are_counted_per_client():
    dm = InstructionDataModule(
        num_clients=2,
        template="plain",
        synthetic_args={"examples_per_client": 6},
        max_length=64,
        on_overflow="truncate",
        truncation="prompt_middle",
        val_fraction=0.0,
    )
    dm.tokenizer = byte_tokenizer()
    with pytest.warns(
        UserWarning,
        match=r"data: \d+ train examples truncated to fit data.max_length=64 \(data.truncation='prompt_middle'\);"
        r" per client: \[\d+, \d+\]",
    ):
        dm.setup("fit")
    counts = dm.data_report()["truncated"]["train"]
    long = [sum(len(i["input_ids"]) == 64 for i in c.full_train) for c in dm.clients]
    assert counts == long and sum(counts) > 0
    with pytest.raises(
        ValueError, match=r"data.truncation must be one of \('prompt_left', 'prompt_middle', 'response'\), got 'head'"
    ):
        InstructionDataModule(truncation="head")


def test_preference_metrics_summed_and_length_normalised_by_hand():
    chosen, rejected = torch.tensor([-4.0, -10.0]), torch.tensor([-5.0, -6.0])
    out = preference_metrics(chosen, rejected, torch.tensor([2, 5]), torch.tensor([5, 2]))
    # summed: -4 > -5 yes, -10 > -6 no; per token: -2 > -1 no, -2 > -3 yes
    assert out["pref_acc_sum"].tolist() == [1.0, 0.0] and out["pref_acc_norm"].tolist() == [0.0, 1.0]


def test_instruction_rouge_answers_the_prompt_part_and_scores_the_labelled_part():
    tok = byte_tokenizer()
    rows = [("Say hi:\n", "hello there"), ("Count:\n", "one two three")]
    batch = PadCollator(tok.pad_token_id)([tokenize_sft(p, r, tok, 64, "error") for p, r in rows])
    answers = {tuple(tok(p)["input_ids"]): a for p, a in (("Say hi:\n", "hello there"), ("Count:\n", "one two four"))}
    seen = []

    class Echo(torch.nn.Module):  # answers from a table keyed by the exact prompt tokens it is given
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def generate(self, input_ids, max_new_tokens, **kwargs):
            seen.append(max_new_tokens)
            rows = [ids + tok(answers[tuple(ids)])["input_ids"][:max_new_tokens] for ids in input_ids.tolist()]
            return torch.tensor(rows)

    out = extra_metrics(SimpleNamespace(model=Echo(), tokenizer=tok), batch)
    assert out["rouge1"].tolist() == pytest.approx([1.0, 2 / 3]) and out["rougeL"].tolist() == pytest.approx(
        [1.0, 2 / 3]
    )
    assert out["rouge2"].tolist() == pytest.approx([1.0, 0.5]) and max(seen) == len("one two three") + 1  # + eos
