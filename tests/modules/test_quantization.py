"""Activation checkpointing changes nothing but memory; nf4/int8 backbones train LoRA on CPU."""

import importlib.util

import lightning.pytorch as pl
import pytest
import torch
from peft import PeftModel

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.datamodules.tokenize import PadCollator, tokenize_preference
from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings, load_backbone
from lightning_fed.modules.quantization import is_quantized
from tests.helpers.runs import fit, preference_data, tiny_llama

TINY_LLAMA = tiny_llama(hidden_size=64, intermediate_size=128, max_position_embeddings=256)
TINY_GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 256}
needs_bnb = pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes is not installed")


def dpo(config, seed=0, lr=5e-3, dropout=0.0, **backbone):
    pl.seed_everything(seed, verbose=False)
    cfg = BackboneConfig(config=dict(config), tokenizer="bytes", **backbone)
    return DPOModule(cfg, lora=LoraSettings(r=4, alpha=8, dropout=dropout), lr=lr, beta=0.5, disable_dropout=False)


def batch_for(module):
    tok = module.tokenizer
    items = [
        tokenize_preference("Rate it.\n", "Truly great.", "Truly awful.", tok, 64, "error"),
        tokenize_preference("A longer prompt here.\n", "Fine, cheers!!", "Fine, regards.", tok, 64, "error"),
    ]
    return PadCollator(tok.pad_token_id)(items)


def test_config_rejects_unknown_quantization():
    with pytest.raises(ValueError, match=r"backbone.quantization must be one of \('none', 'nf4', 'int8'\), got 'fp4'"):
        BackboneConfig(config=dict(TINY_GPT2), quantization="fp4")


@pytest.mark.parametrize("config", [TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def test_activation_checkpointing_gives_the_same_loss_and_gradients(config):
    """Non-reentrant checkpointing (with LoRA dropout on: the RNG is replayed) is exact."""
    plain, ckpt = dpo(config, dropout=0.3), dpo(config, dropout=0.3, activation_checkpointing=True)
    plain.pack_rows = False  # checkpointing does not pack rows (shared_prefix.pack_capacity): the same layout
    assert ckpt.model.get_base_model().is_gradient_checkpointing
    assert not plain.model.get_base_model().is_gradient_checkpointing
    torch.manual_seed(5)
    lora = {k: torch.randn_like(v) * 0.3 for k, v in plain.shared_parameters().items()}  # B != 0
    batch = batch_for(plain)
    grads, losses = [], []
    for module in (plain, ckpt):
        module.load_state(lora)
        module.train()
        torch.manual_seed(11)
        loss = module.pair_metrics(batch)["loss"].mean()
        loss.backward()
        losses.append(loss.detach())
        grads.append({k: p.grad.clone() for k, p in module.shared_parameters().items()})
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-6, atol=1e-7)
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    assert all(g.abs().sum() > 0 for g in grads[0].values())  # every adapter gets a gradient
    for k in grads[0]:
        torch.testing.assert_close(grads[0][k], grads[1][k], rtol=1e-5, atol=1e-7, msg=k)


def test_checkpointing_unsupported_model_is_named(monkeypatch):
    from transformers import LlamaForCausalLM

    monkeypatch.setattr(LlamaForCausalLM, "supports_gradient_checkpointing", False)
    cfg = BackboneConfig(config=dict(TINY_LLAMA), activation_checkpointing=True)
    with pytest.raises(ValueError, match="backbone.activation_checkpointing: model type 'llama'"):
        load_backbone(cfg)


@needs_bnb
@pytest.mark.parametrize("kind", ["nf4", "int8"])
def test_quantized_backbone_is_frozen_and_close(kind):
    pl.seed_everything(0, verbose=False)  # a built model follows the seed: same weights twice
    plain, _ = load_backbone(BackboneConfig(config=dict(TINY_LLAMA)))
    pl.seed_everything(0, verbose=False)
    quant, _ = load_backbone(BackboneConfig(config=dict(TINY_LLAMA), quantization=kind))
    assert is_quantized(quant) and not is_quantized(plain)
    assert not any(p.requires_grad for p in quant.parameters())
    layer = quant.model.layers[0].self_attn.q_proj
    assert type(layer).__name__ == {"nf4": "Linear4bit", "int8": "Linear8bitLt"}[kind]
    ids = torch.randint(0, 259, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        p, q = plain(input_ids=ids).logits, quant(input_ids=ids).logits
    # Quantization error is visible but small next to the logits' spread.
    assert 0 < (p - q).abs().mean() < 0.1 * p.std()


@needs_bnb
def test_nf4_adapter_trains_and_reloads_on_plain_backbone(tmp_path):
    """A few QLoRA steps move only LoRA; the saved adapter loads on the fp32 backbone."""
    module = dpo(TINY_LLAMA, quantization="nf4", activation_checkpointing=True)
    assert type(module.model.get_base_model().model.layers[0].mlp.down_proj.base_layer).__name__ == "Linear4bit"
    frozen_before = {k: v.clone() for k, v in module.state_dict().items() if "lora_" not in k}
    optimizer = module.configure_optimizers()
    batch = batch_for(module)
    module.train()
    losses = []
    for _ in range(5):
        loss = module.pair_metrics(batch)["loss"].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    after = module.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in frozen_before.items())
    module.save_adapter(tmp_path / "adapter")
    assert_adapter_reloads(module, tmp_path / "adapter")


def assert_adapter_reloads(module, folder):
    pl.seed_everything(0, verbose=False)  # the same random weights, unquantized
    plain, _ = load_backbone(BackboneConfig(config=dict(TINY_LLAMA)))
    peft = PeftModel.from_pretrained(plain, str(folder))
    loaded = {k: v for k, v in peft.state_dict().items() if "lora_" in k}
    trained = {k.removeprefix("model."): v for k, v in module.state_dict().items() if "lora_" in k}
    assert len(loaded) == len(trained) > 0
    for k, v in trained.items():
        torch.testing.assert_close(loaded[k], v, msg=k)


@needs_bnb
@pytest.mark.slow
def test_nf4_learns_planted_preference(tmp_path):
    """QLoRA on CPU (bitsandbytes' CPU 4-bit kernels are slow: ~6 min): FedDPO on the planted set."""
    module = dpo(TINY_LLAMA, quantization="nf4", activation_checkpointing=True)
    loop = FederatedLoop(rounds=4, clients_per_round=2, local_steps=8, seed=0)
    fit(module, preference_data(), loop, str(tmp_path), num_sanity_val_steps=-1)
    initial = loop.server.report.initial_eval["val"]["pref_acc"]
    final = loop.server.report.history[-1]["val"]["pref_acc"]
    assert initial < 0.7 and final >= 0.9, (initial, final)
    assert_adapter_reloads(module, tmp_path / "adapter")
