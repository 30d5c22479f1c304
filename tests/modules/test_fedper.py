"""FedPer: lower LoRA layers shared, upper LoRA layers and the LM head personal."""

import pytest

from lightning_fed.modules.fedper import FedPerModule, layer_index
from tests.helpers.personal import tiny


def test_layer_index_of_common_names():
    assert layer_index("model.base_model.model.transformer.h.3.attn.c_attn.lora_A.default.weight") == 3
    assert layer_index("model.base_model.model.model.layers.12.self_attn.q_proj.lora_B.default.weight") == 12
    assert layer_index("lm_head.weight") is None


def test_split_by_layer_index():
    m = tiny(FedPerModule, shared_layers=1)
    shared, personal = m.shared_parameters(), m.personal_parameters()
    assert shared and all(".h.0." in k and ".lora_" in k for k in shared)
    assert {k for k in personal if ".lora_" in k} == {
        k for k, _ in m.named_parameters() if ".h.1." in k and ".lora_" in k
    }
    assert "lm_head.weight" in personal and all(p.requires_grad for p in personal.values())


@pytest.mark.parametrize(
    "layers, message",
    [
        (0, "model.shared_layers must be >= 1, got 0"),
        (2, r"model.shared_layers=2 leaves no personal layer: LoRA is on blocks \[0, 1\]"),
    ],
)
def test_bad_split_is_an_error(layers, message):
    with pytest.raises(ValueError, match=message):
        tiny(FedPerModule, shared_layers=layers)
