"""DPOModule: the reference is the adapter-free model, one forward for both responses."""

import math

import pytest
import torch

from lightning_fed.datamodules.tokenize import PadCollator, tokenize_preference
from tests.helpers.runs import tiny_dpo


@pytest.fixture
def module_and_batch():
    module = tiny_dpo(seed=1)
    tok = module.tokenizer
    items = [
        tokenize_preference("Rate it.\n", "Truly great.", "Truly awful.", tok, 64, "error"),
        tokenize_preference("A longer prompt here.\n", "Fine, cheers!!", "Fine, regards.", tok, 64, "error"),
    ]
    return module, PadCollator(tok.pad_token_id)(items)


def randomize_lora(module):
    with torch.no_grad():
        for p in module.shared_parameters().values():
            p.normal_(0, 0.5)


def test_metrics_at_initialisation(module_and_batch):
    module, batch = module_and_batch
    m = module.pair_metrics(batch)  # LoRA B = 0: the policy is the reference
    assert m["loss"].tolist() == pytest.approx([math.log(2)] * 2)
    assert m["reward_margin"].tolist() == [0.0, 0.0]
    assert m["reward_acc"].tolist() == [0.5, 0.5]


def test_reference_is_the_model_without_adapters(module_and_batch):
    module, batch = module_and_batch
    randomize_lora(module)
    ref_chosen, ref_rejected = module.reference_log_probs(batch)
    policy_chosen, _ = module.sequence_log_probs(batch)
    assert not torch.allclose(ref_chosen, policy_chosen)
    with torch.no_grad():
        for p in module.shared_parameters().values():
            p.zero_()
        base_chosen, base_rejected = module.sequence_log_probs(batch)
    torch.testing.assert_close(ref_chosen, base_chosen)
    torch.testing.assert_close(ref_rejected, base_rejected)
    assert not ref_chosen.requires_grad


def test_concatenated_forward_equals_separate_forwards(module_and_batch):
    module, batch = module_and_batch
    randomize_lora(module)
    chosen, rejected = module.sequence_log_probs(batch)
    from lightning_fed.modules.losses import sequence_log_probs

    for name, joint in (("chosen", chosen), ("rejected", rejected)):
        logits = module.model(
            input_ids=batch[f"{name}_input_ids"], attention_mask=batch[f"{name}_attention_mask"]
        ).logits
        torch.testing.assert_close(sequence_log_probs(logits, batch[f"{name}_labels"]), joint, rtol=1e-5, atol=1e-5)


def test_training_step_moves_only_adapters(module_and_batch):
    module, batch = module_and_batch
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    opt = module.configure_optimizers()
    for _ in range(3):
        loss = module.pair_metrics(batch)["loss"].mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    changed = {n for n, p in module.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert module.pair_metrics(batch)["reward_margin"].mean() > 0


def test_bad_hyperparameters_are_named():
    from lightning_fed.modules import BackboneConfig, DPOModule

    cfg = BackboneConfig(config={"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2}, tokenizer="bytes")
    with pytest.raises(ValueError, match="model.beta must be > 0, got 0"):
        DPOModule(cfg, beta=0)
    with pytest.raises(ValueError, match="model.optimizer must be one of"):
        DPOModule(cfg, optimizer="adam")


def test_dropout_is_disabled_for_dpo_but_the_model_trains(module_and_batch):
    module, batch = module_and_batch
    randomize_lora(module)
    assert module.model.training  # not left in a loaded model's eval mode
    a, _ = module.sequence_log_probs(batch)
    b, _ = module.sequence_log_probs(batch)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_sft_keeps_dropout_active_in_training():
    import lightning.pytorch as pl

    from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule

    pl.seed_everything(0, verbose=False)
    cfg = BackboneConfig(config={"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2}, tokenizer="bytes")
    module = SFTModule(cfg, lora=LoraSettings(r=2, dropout=0.5))
    lora_dropouts = [
        m for n, m in module.model.named_modules() if "lora_dropout" in n and isinstance(m, torch.nn.Dropout)
    ]
    assert lora_dropouts and all(m.training and m.p == 0.5 for m in lora_dropouts)


def test_configs_given_as_dicts_become_dataclasses():
    from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule

    module = SFTModule(
        {"config": {"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2}, "tokenizer": "bytes"},
        lora={"r": 2, "alpha": 4},
    )
    assert isinstance(module.hparams.backbone, BackboneConfig)
    assert module.hparams.lora == LoraSettings(r=2, alpha=4)
