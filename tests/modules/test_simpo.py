"""SimPO: the loss against hand values, one forward for both responses, and learning."""

import math

import lightning.pytorch as pl
import pytest
import torch

from lightning_fed.datamodules.tokenize import PadCollator, tokenize_preference
from lightning_fed.modules import BackboneConfig, LoraSettings, SimPOModule
from lightning_fed.modules.losses import IGNORE_INDEX, sequence_log_probs
from lightning_fed.modules.simpo import simpo_loss
from tests.helpers.runs import TINY_GPT2


def tiny_simpo(seed: int = 0, lr: float = 1e-2, beta: float = 2.0, gamma: float = 1.0) -> SimPOModule:
    pl.seed_everything(seed, verbose=False)
    return SimPOModule(
        BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        lr=lr,
        beta=beta,
        gamma=gamma,
    )


def test_loss_hand_values():
    # pair 1: rewards 2 * -0.5 = -1 and 2 * -1.5 = -3; margin 2 - gamma 0.5 = 1.5;
    #         loss = -log sigmoid(1.5) = log(1 + e^-1.5) = 0.201413
    # pair 2: equal rewards (-2); margin 0 - 0.5; loss = log(1 + e^0.5) = 0.974077
    losses, r_chosen, r_rejected = simpo_loss(
        torch.tensor([-0.5, -1.0]), torch.tensor([-1.5, -1.0]), beta=2.0, gamma=0.5
    )
    torch.testing.assert_close(r_chosen, torch.tensor([-1.0, -2.0]))
    torch.testing.assert_close(r_rejected, torch.tensor([-3.0, -2.0]))
    torch.testing.assert_close(losses, torch.tensor([0.201413, 0.974077]), rtol=0, atol=1e-6)
    assert math.log1p(math.exp(-1.5)) == pytest.approx(0.201413, abs=1e-6)


def test_loss_gradient_is_length_normalised_and_rewards_are_detached():
    chosen = torch.tensor([-1.0], requires_grad=True)
    rejected = torch.tensor([-1.0], requires_grad=True)
    losses, r_chosen, r_rejected = simpo_loss(chosen, rejected, beta=2.0, gamma=0.0)
    losses.sum().backward()
    # d/dc -log sigmoid(2c - 2r) at c = r is -2 * 1/2 = -1; +1 for r.
    assert chosen.grad.item() == pytest.approx(-1.0) and rejected.grad.item() == pytest.approx(1.0)
    assert not r_chosen.requires_grad and not r_rejected.requires_grad


@pytest.fixture
def module_and_batch():
    module = tiny_simpo(seed=1)
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
    losses, _, _ = simpo_loss(avg["chosen"], avg["rejected"], module.beta, module.gamma)
    torch.testing.assert_close(m["loss"], losses, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(m["reward_margin"], 2.0 * (avg["chosen"] - avg["rejected"]), rtol=1e-4, atol=1e-5)
    assert m["pref_acc"].tolist() == (total["chosen"] > total["rejected"]).float().tolist()
    assert set(m) == {"loss", "reward_margin", "reward_acc", "pref_acc"}


def test_training_step_moves_only_adapters(module_and_batch):
    module, batch = module_and_batch
    module.training_step(batch, 0)["loss"].backward()
    grads = {n: p.grad for n, p in module.named_parameters() if p.grad is not None}
    assert grads and all("lora_" in n for n in grads)


def test_bad_hyperparameters_are_named_together():
    with pytest.raises(
        ValueError, match=r"^model.beta must be in \(0, 1000.0\], got 0; model.gamma must be >= 0, got -1$"
    ):
        tiny_simpo(beta=0, gamma=-1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simpo_learns_planted_preference(tmp_path, seed):
    """Held-out reward and preference accuracy rise from chance to >= 0.9 (FedAvg, 3 rounds of 2 clients).

    Measured on seeds 0-4 (commit of this test): initial accuracy 0.29-0.58, final 1.0 on every seed; the
    SimPO reward margin rose by 0.124-0.174 (mean 0.142, sd 0.02) from ~0 (|margin| <= 0.015), so the
    asserted rise of 0.05 sits about 4 sd below the mean.
    """
    from lightning_fed.callbacks import FederatedLoop
    from tests.helpers.runs import fit, preference_data

    loop = FederatedLoop(rounds=3, clients_per_round=2, local_steps=8, seed=seed)
    fit(tiny_simpo(seed=seed), preference_data(), loop, str(tmp_path), num_sanity_val_steps=-1)
    initial = loop.server.report.initial_eval["val"]
    final = loop.server.report.history[-1]["val"]
    assert initial["reward_acc"] < 0.7 and initial["pref_acc"] < 0.7, initial
    assert final["reward_acc"] >= 0.9 and final["pref_acc"] >= 0.9, (initial, final)
    assert final["reward_margin"] >= initial["reward_margin"] + 0.05 and final["loss"] < initial["loss"], final


def test_zero_dropout_clears_modules_and_llama_style_attention_dropout():
    """DPO, ORPO and SimPO share one helper: ORPO and SimPO used to leave the float
    ``attention_dropout`` of Llama-style attention (SmolLM2) at its configured value."""
    from torch import nn

    from lightning_fed.modules.preference import zero_dropout

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention_dropout = 0.1

    model = nn.Sequential(nn.Dropout(0.2), Attention(), nn.Linear(2, 2))
    zero_dropout(model)
    assert model[0].p == 0.0 and model[1].attention_dropout == 0.0
