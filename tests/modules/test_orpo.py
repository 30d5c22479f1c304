"""ORPO: the loss against hand values, one forward for both responses, and learning."""

import math

import lightning.pytorch as pl
import pytest
import torch

from lightning_fed.datamodules.tokenize import PadCollator, tokenize_preference
from lightning_fed.modules import BackboneConfig, LoraSettings, ORPOModule
from lightning_fed.modules.losses import IGNORE_INDEX, sequence_log_probs
from lightning_fed.modules.orpo import log_odds, orpo_loss
from tests.helpers.runs import TINY_GPT2


def tiny_orpo(seed: int = 0, lr: float = 1e-2, odds_ratio_weight: float = 5.0) -> ORPOModule:
    pl.seed_everything(seed, verbose=False)
    return ORPOModule(
        BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        lr=lr,
        odds_ratio_weight=odds_ratio_weight,
    )


def test_loss_hand_values():
    chosen = torch.tensor([math.log(0.5), math.log(0.8)])
    rejected = torch.tensor([math.log(0.2), math.log(0.8)])
    losses, nll, ratio = orpo_loss(chosen, rejected, odds_ratio_weight=0.5)
    # pair 1: odds 0.5/0.5 = 1 and 0.2/0.8 = 1/4; log OR = log 4; L_OR = log(1 + 1/4) = log 1.25
    #         loss = -log 0.5 + 0.5 * log 1.25 = 0.693147 + 0.111572 = 0.804719
    # pair 2: equal odds; log OR = 0; L_OR = log 2; loss = -log 0.8 + 0.5 * log 2 = 0.223144 + 0.346574
    torch.testing.assert_close(ratio, torch.tensor([math.log(4.0), 0.0]))
    torch.testing.assert_close(nll, torch.tensor([0.693147, 0.223144]), rtol=0, atol=1e-6)
    torch.testing.assert_close(losses, torch.tensor([0.804719, 0.569718]), rtol=0, atol=1e-6)


def test_log_odds_is_finite_at_the_ends():
    out = log_odds(torch.tensor([0.0, -1e-9, math.log(0.5), -200.0]))
    assert torch.isfinite(out).all()
    assert out[2].item() == pytest.approx(0.0, abs=1e-7)  # P = 1/2: odds 1
    assert out[3].item() == pytest.approx(-200.0, abs=1e-4)  # P -> 0: log odds -> log P
    assert out[1].item() == pytest.approx(math.log(1e9), rel=1e-3)  # P -> 1: log odds -> -log(1 - P)


@pytest.fixture
def module_and_batch():
    module = tiny_orpo(seed=1)
    with torch.no_grad():  # a non-trivial adapter, so that the policy is not the base model
        for p in module.shared_parameters().values():
            p.normal_(0, 0.5)
    tok = module.tokenizer
    items = [
        tokenize_preference("Rate it.\n", "Truly great.", "Truly awful!!", tok, 64, "error"),
        tokenize_preference("A longer prompt here.\n", "Fine, cheers!!", "Fine.", tok, 64, "error"),
    ]
    return module, PadCollator(tok.pad_token_id)(items)


def test_pair_metrics_equal_separate_length_averaged_forwards(module_and_batch):
    module, batch = module_and_batch
    m = module.pair_metrics(batch)
    avg, total = {}, {}
    for name in ("chosen", "rejected"):
        logits = module.model(
            input_ids=batch[f"{name}_input_ids"], attention_mask=batch[f"{name}_attention_mask"]
        ).logits
        labels = batch[f"{name}_labels"]
        total[name] = sequence_log_probs(logits, labels)
        avg[name] = total[name] / (labels[:, 1:] != IGNORE_INDEX).sum(-1)
    losses, nll, ratio = orpo_loss(avg["chosen"], avg["rejected"], module.odds_ratio_weight)
    torch.testing.assert_close(m["loss"], losses, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(m["nll"], nll, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(m["log_odds_ratio"], ratio, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(m["reward_margin"], avg["chosen"] - avg["rejected"], rtol=1e-4, atol=1e-5)
    assert m["pref_acc"].tolist() == (total["chosen"] > total["rejected"]).float().tolist()
    chosen, rejected = module.sequence_log_probs(batch)  # summed, for `lightning-fed test`
    torch.testing.assert_close(chosen, total["chosen"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(rejected, total["rejected"], rtol=1e-4, atol=1e-4)


def test_training_step_moves_only_adapters(module_and_batch):
    module, batch = module_and_batch
    loss = module.training_step(batch, 0)["loss"]
    loss.backward()
    grads = {n: p.grad for n, p in module.named_parameters() if p.grad is not None}
    assert grads and all("lora_" in n for n in grads)


def test_bad_weight_is_named():
    with pytest.raises(ValueError, match="model.odds_ratio_weight must be > 0, got 0"):
        tiny_orpo(odds_ratio_weight=0)


def test_orpo_learns_planted_preference(tmp_path):
    """Reward and preference accuracy on held-out pairs rise from chance to >= 0.9 (FedAvg)."""
    from lightning_fed.callbacks import FederatedLoop
    from tests.helpers.runs import fit, preference_data

    loop = FederatedLoop(rounds=3, clients_per_round=2, local_steps=8, seed=0)
    fit(tiny_orpo(), preference_data(), loop, str(tmp_path), num_sanity_val_steps=-1)
    initial = loop.server.report.initial_eval["val"]
    final = loop.server.report.history[-1]["val"]
    assert initial["reward_acc"] < 0.7 and initial["pref_acc"] < 0.7, initial
    assert final["reward_acc"] >= 0.9 and final["pref_acc"] >= 0.9, (initial, final)
    # the planted pairs differ in one word of a long response: the length-averaged odds move little
    assert final["log_odds_ratio"] > initial["log_odds_ratio"] + 0.03 and final["nll"] < initial["nll"], final
