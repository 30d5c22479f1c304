"""LayerExtract (FedBiOT Algorithm 2) and the offsite-tuning layout, against indices worked by hand."""

import pytest
from torch import nn

from lightning_fed.modules import BackboneConfig, load_backbone
from lightning_fed.modules.layer_extract import decoder_path, layer_extract, offsite_layout, uniform_drop


@pytest.mark.parametrize(
    ("n", "s", "beta", "emulator"),
    [
        # E* = 0..5 (6 layers), n' = floor(0.5 * 6) = 3, stride = 5 / 2 = 2.5 -> floor(0, 2.5, 5)
        (8, 2, 0.5, (0, 2, 5)),
        # E* = 0..9, n' = floor(0.8 * 10) = 8, stride = 9/7: 0, 1.29, 2.57, 3.86, 5.14, 6.43, 7.71, 9
        (12, 2, 0.2, (0, 1, 2, 3, 5, 6, 7, 9)),
        # LLaMA-7B, adapter 4, drop 0.2: the paper's "28 layers -> 22"; n' = floor(22.4) = 22, stride 27/21 = 9/7
        (32, 4, 0.2, (0, 1, 2, 3, 5, 6, 7, 9, 10, 11, 12, 14, 15, 16, 18, 19, 20, 21, 23, 24, 25, 27)),
        # no drop: the emulator is E* itself (stride 1)
        (6, 1, 0.0, (0, 1, 2, 3, 4)),
        # n' = floor(0.4 * 3) = 1: only j = 0, floor(0 * stride) = 0
        (5, 2, 0.6, (0,)),
    ],
)
def test_layer_extract_matches_algorithm_2(n, s, beta, emulator):
    layout = layer_extract(n, s, beta)
    assert layout.adapter == tuple(range(n - s, n))  # Alg. 2 line 3: the last s layers
    assert layout.adapter_bottom == ()
    assert layout.non_compressed == tuple(range(n - s))
    assert layout.emulator == emulator


def test_llama_7b_adapter_2_keeps_24_of_30_layers():
    """The paper's Sec. 4 numbers: drop 0.2 of the 30 non-adapter layers leaves 24."""
    emulator = layer_extract(32, 2, 0.2).emulator
    # stride 29/23: floor(j * 29 / 23) skips 4, 9, 14, 19, 24 and 28
    assert emulator == tuple(i for i in range(30) if i not in (4, 9, 14, 19, 24, 28))


@pytest.mark.parametrize(
    ("n", "beta", "emulator"),
    [
        (8, 0.5, (2, 5)),  # E* = 2..5, n' = 2, stride 3
        (12, 0.25, (2, 3, 4, 6, 7, 9)),  # E* = 2..9, n' = 6, stride 7/5: 0, 1.4, 2.8, 4.2, 5.6, 7 (+2)
    ],
)
def test_offsite_layout_first_two_and_last_two(n, beta, emulator):
    layout = offsite_layout(n, beta)
    assert layout.adapter_bottom == (0, 1) and layout.adapter_top == (n - 2, n - 1)
    assert layout.non_compressed == tuple(range(2, n - 2))
    assert layout.emulator == emulator


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: layer_extract(6, 6, 0.5), "adapter_layers (s) must be in [1, 5]"),
        (lambda: layer_extract(6, 0, 0.5), "adapter_layers (s) must be in [1, 5]"),
        (lambda: layer_extract(6, 2, 1.0), "must be in [0, 1), got 1.0"),
        (lambda: layer_extract(6, 2, -0.1), "must be in [0, 1), got -0.1"),
        (lambda: layer_extract(4, 2, 0.6), "drops all 2 non-adapter layers"),
        (lambda: offsite_layout(4, 0.5), "needs at least 5 decoder layers"),
        (lambda: uniform_drop([0, 1], 1.5), "must be in [0, 1)"),
    ],
)
def test_bad_sizes_are_one_line_errors(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert message in str(err.value) and "\n" not in str(err.value)


def test_decoder_path_gpt2_llama_and_unknown():
    gpt2, _ = load_backbone(
        BackboneConfig(config={"model_type": "gpt2", "n_layer": 2, "n_embd": 16, "n_head": 2}, tokenizer="bytes")
    )
    llama, _ = load_backbone(
        BackboneConfig(
            config={
                "model_type": "llama",
                "num_hidden_layers": 2,
                "hidden_size": 16,
                "intermediate_size": 32,
                "num_attention_heads": 2,
                "num_key_value_heads": 2,
            },
            tokenizer="bytes",
        )
    )
    assert decoder_path(gpt2) == "transformer.h"
    assert decoder_path(llama) == "model.layers"
    with pytest.raises(ValueError, match="unsupported architecture Sequential") as err:
        decoder_path(nn.Sequential(nn.Linear(2, 2)))
    assert "\n" not in str(err.value)
