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
