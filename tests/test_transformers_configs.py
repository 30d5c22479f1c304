"""The keys read from transformers' source (lightning_fed/transformers_configs.py) are the live
config class's: every attribute a default instance holds, and its ``attribute_map`` aliases."""

from __future__ import annotations

import pytest

from lightning_fed.transformers_configs import config_class_keys


@pytest.mark.parametrize("model_type", ["gpt2", "llama", "qwen2", "mistral"])
def test_the_keys_read_from_source_hold_the_live_class_s(model_type):
    from transformers import AutoConfig

    live = AutoConfig.for_model(model_type)
    name, keys = config_class_keys(model_type)
    assert name == type(live).__name__
    assert {key for key in live.to_dict() if not key.startswith("_")} <= keys  # `_name_or_path`: private
    assert set(type(live).attribute_map) <= keys
    assert "n_embd_" not in keys


def test_an_unknown_model_type_is_left_to_the_live_code():
    assert config_class_keys("no_such_model") is None
    assert config_class_keys("../gpt2") is None


@pytest.mark.parametrize("model_type", ["gpt2", "opt", "gpt_neox", "llama"])
def test_a_model_type_said_to_refuse_heads_that_do_not_divide_its_width_does(model_type):
    """:data:`~lightning_fed.transformers_configs.HEADS_DIVIDE`: the live config or model refuses 3
    heads over a width of 32, and :func:`heads_problem` says so (4 heads: neither does)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from lightning_fed.transformers_configs import HEADS_DIVIDE, heads_problem

    width, heads = HEADS_DIVIDE[model_type]
    layers = "n_layer" if model_type == "gpt2" else "num_hidden_layers"
    small = {layers: 1, "vocab_size": 64, **({"intermediate_size": 64} if model_type in ("gpt_neox", "llama") else {})}
    if model_type == "opt":
        small.update(ffn_dim=64, word_embed_proj_dim=32)
    with pytest.raises(Exception, match="divisible|multiple"):  # a config's: huggingface_hub's validation error
        AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **small, **{width: 32, heads: 3}))
    assert heads_problem("c", {"model_type": model_type, width: 32, heads: 3}) is not None
    AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **small, **{width: 32, heads: 4}))
    assert heads_problem("c", {"model_type": model_type, width: 32, heads: 4}) is None


def test_the_module_names_of_a_model_type_are_the_live_model_s():
    """:data:`~lightning_fed.transformers_configs.MODULE_NAMES` is what ``lora_config`` looks targets up in."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from lightning_fed.modules.lora import linear_module_names
    from lightning_fed.transformers_configs import MODULE_NAMES

    for model_type, (names, linear) in MODULE_NAMES.items():
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, n_layer=2, n_embd=16, n_head=2))
        live = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules() if name}
        assert names == {n for n in live if not n.isdigit()}
        assert list(linear) == linear_module_names(model)
