"""LoRA on tiny models: targets, freezing, the adapter predicate, save/load, disabling."""

import copy

import pytest
import torch
from peft import PeftModel
from transformers import AutoConfig, AutoModelForCausalLM

from lightning_fed.modules.backbone import BackboneConfig, load_backbone
from lightning_fed.modules.lora import (
    DEFAULT_TARGET_MODULES,
    LoraSettings,
    add_adapter,
    apply_lora,
    is_adapter_param,
)
from tests.helpers.runs import tiny_llama

TINY = {
    "gpt2": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 64},
    "llama": tiny_llama(max_position_embeddings=64),
}


def tiny(model_type):
    torch.manual_seed(0)
    model, tok = load_backbone(BackboneConfig(config=dict(TINY[model_type]), tokenizer="bytes"))
    return model, tok


def randomize_adapters(model):
    """lora_B starts at zero, so an untrained adapter is invisible; make it visible."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if is_adapter_param(name):
                param.normal_(std=0.5)


def logits(model, tok, text="hello world"):
    ids = tok(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return model(ids).logits


def test_settings_collect_all_problems():
    with pytest.raises(ValueError) as info:
        LoraSettings(r=0, alpha=-1, dropout=1.0)
    assert str(info.value) == (
        "model.lora.r must be > 0, got 0; model.lora.alpha must be in (0, 1000000.0], got -1;"
        " model.lora.dropout must be in [0, 1), got 1.0"
    )


def test_settings_reject_empty_targets():
    with pytest.raises(ValueError, match=r"model.lora.target_modules must be None or a non-empty list"):
        LoraSettings(target_modules=[])


def test_is_adapter_param():
    assert is_adapter_param("base_model.model.transformer.h.0.attn.c_attn.lora_A.default.weight")
    assert is_adapter_param("model.layers.0.self_attn.q_proj.lora_B.second.weight")
    assert not is_adapter_param("base_model.model.transformer.h.0.attn.c_attn.base_layer.weight")
    assert not is_adapter_param("lm_head.weight")


@pytest.mark.parametrize("model_type", sorted(DEFAULT_TARGET_MODULES))
def test_default_targets_exist(model_type):
    sizes = {
        "gpt2": {"n_layer": 1, "n_embd": 16, "n_head": 2},
        "gpt_neox": {
            "num_hidden_layers": 1,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_attention_heads": 2,
        },
        "opt": {
            "num_hidden_layers": 1,
            "hidden_size": 16,
            "ffn_dim": 32,
            "num_attention_heads": 2,
            "word_embed_proj_dim": 16,
        },
    }
    default = {
        "num_hidden_layers": 1,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "pad_token_id": 0,
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    config = AutoConfig.for_model(model_type, vocab_size=32, **sizes.get(model_type, default))
    model = apply_lora(AutoModelForCausalLM.from_config(config), LoraSettings(r=2))
    adapted = {n.rsplit(".", 3)[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters() if "lora_A" in n}
    assert adapted == set(DEFAULT_TARGET_MODULES[model_type])


@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_only_adapters_trainable(model_type):
    model, _ = tiny(model_type)
    n_base = sum(p.numel() for p in model.parameters())
    peft_model = apply_lora(model, LoraSettings(r=4))
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    adapters = {n for n, _ in peft_model.named_parameters() if is_adapter_param(n)}
    assert trainable == adapters and adapters
    frozen = sum(p.numel() for n, p in peft_model.named_parameters() if not p.requires_grad)
    assert frozen == n_base  # the whole base model is frozen, nothing else is
    assert all("lora_A" in n or "lora_B" in n for n in adapters)


def test_gpt2_conv1d_gets_fan_in_fan_out():
    model, _ = tiny("gpt2")
    peft_model = apply_lora(model, LoraSettings())
    assert peft_model.peft_config["default"].fan_in_fan_out is True
    model, _ = tiny("llama")
    assert apply_lora(model, LoraSettings()).peft_config["default"].fan_in_fan_out is False


@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_save_load_round_trip(model_type, tmp_path):
    model, tok = tiny(model_type)
    base_copy = copy.deepcopy(model)
    peft_model = apply_lora(model, LoraSettings(r=4)).eval()
    randomize_adapters(peft_model)
    expected = logits(peft_model, tok)
    assert not torch.allclose(expected, logits(base_copy, tok))

    peft_model.save_pretrained(tmp_path)
    loaded = PeftModel.from_pretrained(base_copy, tmp_path).eval()
    torch.testing.assert_close(logits(loaded, tok), expected, rtol=0, atol=0)


@pytest.mark.parametrize("model_type", ["gpt2", "llama"])
def test_disable_adapter_gives_base_logits(model_type):
    model, tok = tiny(model_type)
    base = logits(model, tok)
    peft_model = apply_lora(model, LoraSettings()).eval()
    randomize_adapters(peft_model)
    assert not torch.allclose(logits(peft_model, tok), base)
    with peft_model.disable_adapter():
        torch.testing.assert_close(logits(peft_model, tok), base, rtol=0, atol=0)


def test_bad_target_module_message():
    model, _ = tiny("gpt2")
    with pytest.raises(ValueError) as info:
        apply_lora(model, LoraSettings(target_modules=["c_attn", "q_proj"]))
    assert str(info.value) == (
        "model.lora.target_modules: model type 'gpt2' has no module named 'q_proj' "
        "(Linear-like modules it has: c_attn, c_fc, c_proj, lm_head)"
    )
    assert not any(is_adapter_param(n) for n, _ in model.named_parameters())  # untouched


def test_unknown_model_type_needs_targets():
    config = AutoConfig.for_model(
        "phi",
        num_hidden_layers=1,
        hidden_size=16,
        intermediate_size=32,
        num_attention_heads=2,
        vocab_size=32,
    )
    model = AutoModelForCausalLM.from_config(config)
    with pytest.raises(ValueError) as info:
        apply_lora(model, LoraSettings())
    assert str(info.value) == (
        "model.lora.target_modules: no default for model type 'phi'; set model.lora.target_modules to some "
        "of its Linear-like modules: dense, fc1, fc2, k_proj, lm_head, q_proj, v_proj"
    )
    assert apply_lora(model, LoraSettings(target_modules=["q_proj", "v_proj"])) is not None


def test_second_adapter():
    model, tok = tiny("llama")
    peft_model = apply_lora(model, LoraSettings(r=4)).eval()
    add_adapter(peft_model, LoraSettings(r=2, target_modules=["q_proj", "v_proj"]), "second")
    assert set(peft_model.peft_config) == {"default", "second"}
    names = [n for n, _ in peft_model.named_parameters() if is_adapter_param(n)]
    assert any(".second." in n for n in names) and any(".default." in n for n in names)
    assert peft_model.active_adapter == "default"

    randomize_adapters(peft_model)
    first = logits(peft_model, tok)
    peft_model.set_adapter("second")
    second = logits(peft_model, tok)
    assert not torch.allclose(first, second)
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert trainable and all(".second." in n for n in trainable)

    with pytest.raises(ValueError, match="adapter_name 'second' is already used"):
        add_adapter(peft_model, LoraSettings(), "second")
    with pytest.raises(ValueError, match="has no module named 'c_attn'"):
        add_adapter(peft_model, LoraSettings(target_modules=["c_attn"]), "third")
