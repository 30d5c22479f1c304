"""The FedBis pipeline's seams: stage 1 through the CLI it is given, stage 2's data handed over."""

import json
import os
from types import SimpleNamespace

import pytest
import torch

from lightning_fed.datamodules import PreferenceDataModule, RLFTDataModule
from lightning_fed.modules.selector_source import SelectorSource, load_selector
from lightning_fed.pipelines import flower_refusals, prepare_stages
from lightning_fed.pipelines.fedbis import train_selector, usable_pairs
from tests.modules.test_selector import tiny_selector


def test_stage_one_runs_the_given_fit_and_leaves_the_callers_rng_and_seed(tmp_path, monkeypatch):
    config = tmp_path / "selector.yaml"
    config.write_text("seed_everything: 5\n")
    selector, calls = tiny_selector(), []

    def fit(args):  # stands in for lightning_fed.cli.main: seeds its own run, trains, returns the CLI
        calls.append(args)
        import lightning.pytorch as pl

        pl.seed_everything(5, verbose=False)
        torch.rand(10)
        return SimpleNamespace(model=selector)

    monkeypatch.setenv("PL_GLOBAL_SEED", "11")
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    assert train_selector(str(config), ["--federation.rounds=2"], fit) is selector
    assert calls == [["fit", "--config", str(config), "--federation.rounds=2"]]
    assert torch.equal(torch.rand(3), expected) and os.environ["PL_GLOBAL_SEED"] == "11"

    with pytest.raises(ValueError, match=r"selector.train_config '.*' trains a SimpleNamespace, not a BinarySelector"):
        train_selector(str(config), [], lambda args: SimpleNamespace(model=SimpleNamespace()))
    with pytest.raises(FileNotFoundError, match=r"selector.train_config '.*nope.yaml': no such file"):
        train_selector(str(tmp_path / "nope.yaml"), [], fit)


def test_a_saved_d_gen_is_reused_without_any_stage(tmp_path):
    records = [{"prompt": "p", "chosen": "good", "rejected": "bad"}] * 3
    path = tmp_path / "d_gen.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    dm = RLFTDataModule(selector=SelectorSource(train_config="never.yaml"), records_path=str(path))

    def fit(args):
        raise AssertionError("stage 1 must not run when data.records_path exists")

    assert prepare_stages(object(), dm, fit) is True and dm.generated == records
    assert prepare_stages(object(), PreferenceDataModule(num_clients=2), fit) is False  # not a FedBis run


def test_only_the_rlft_stage_is_refused_under_flower_even_with_a_saved_d_gen(tmp_path):
    """App. A.2: RLFT is the server's own training; a saved D_gen does not make it a client's."""
    path = tmp_path / "d_gen.jsonl"
    path.write_text(json.dumps({"prompt": "p", "chosen": "good", "rejected": "bad"}) + "\n")
    (line,) = flower_refusals(RLFTDataModule(records_path=str(path)))
    assert line.startswith("data: RLFTDataModule cannot run under Flower: RLFT trains the policy on the server's")
    assert "\n" not in line
    assert flower_refusals(PreferenceDataModule(num_clients=2)) == []  # FedDPO on the clients' own pairs


def test_rlft_data_without_d_gen_names_the_pipeline_and_load_selector_needs_a_path():
    dm = RLFTDataModule(selector=SelectorSource(path="x"))
    with pytest.raises(ValueError, match="no D_gen yet; build it with lightning_fed.pipelines.fedbis.prepare_rlft"):
        dm.load_records()
    with pytest.raises(ValueError, match="selector.train_config 'a.yaml' names a run, not a saved selector"):
        load_selector(SelectorSource(train_config="a.yaml"))
    with pytest.raises(ValueError, match="selector.backbone: .*'layers'"):
        load_selector(SelectorSource(path="x", backbone={"layers": 2}))
    with pytest.raises(ValueError, match=r"data.selector_template must be one of \['shp', .*\], got 'nope'"):
        RLFTDataModule(selector=SelectorSource(path="x"), selector_template="nope")


def test_usable_pairs_drops_blank_and_equal_completions():
    pairs = [
        {"prompt": "p", "chosen": "a", "rejected": "b"},
        {"prompt": "p", "chosen": " ", "rejected": "b"},
        {"prompt": "p", "chosen": "a", "rejected": "a"},
    ]
    assert usable_pairs(pairs) == pairs[:1]


def test_d_gen_prompts_the_policy_in_its_chat_template(monkeypatch):
    """With ``data.template: chat`` the policy samples from its chat-template prompt (system turn
    included), as it was trained, not from the bare prompt."""
    from lightning_fed.pipelines import fedbis
    from tests.datamodules.test_chat_template import chatml_tokenizer

    seen = {}

    def sample(model, tokenizer, formatted, *args):
        seen["formatted"] = formatted
        return [["a", "b"] for _ in formatted]

    def label(selector, prompts, completions, *args):
        return [{"prompt": p, "chosen": "a", "rejected": "b"} for p in prompts]

    monkeypatch.setattr(fedbis, "sample_completions", sample)
    monkeypatch.setattr(fedbis, "label_pairs", label)
    nothing = SimpleNamespace(to=lambda device: None, num_selectors=1)
    policy = SimpleNamespace(device=torch.device("cpu"), to=nothing.to, model=None, tokenizer=chatml_tokenizer())
    data = SimpleNamespace(
        prompts=["Name a colour."],
        template="chat",
        system_prompt="Be brief.",
        num_completions=2,
        max_new_tokens=4,
        temperature=1.0,
        generation_seed=0,
        selector_template="shp",
        selector_max_length=64,
        selector_batch_size=2,
    )
    fedbis.preference_set(policy, nothing, data)
    assert seen["formatted"] == [
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n"
    ]
