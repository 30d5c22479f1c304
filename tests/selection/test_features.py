"""Eq. (6) features from the tuned model and from the proxy (FedHDS-Turbo)."""

import numpy as np

from lightning_fed.selection import ProxyEncoder, layer_features
from lightning_fed.selection.features import sample_tokens
from tests.selection.conftest import PROXY, planted, tiny_sft


def test_layer_features_concatenate_every_layer_and_ignore_padding():
    module = tiny_sft()
    items = planted(module, num_clients=1, per_client=6).client(0).full_train
    module.train()
    feats = layer_features(module.model, items, module.tokenizer.pad_token_id, batch_size=6)
    assert feats.shape == (6, 2 * 64)  # 2 layers x 64 hidden
    assert module.training  # mode restored
    alone = layer_features(module.model, items[:1], module.tokenizer.pad_token_id)
    assert np.allclose(alone[0], feats[0], atol=1e-5)  # batched with longer rows: same features
    prompt = layer_features(module.model, items, module.tokenizer.pad_token_id, text="prompt")
    assert not np.allclose(prompt, feats)
    assert len(sample_tokens(items[0], "prompt")) < len(items[0]["input_ids"])


def test_proxy_encoder_is_the_offline_minilm_package():
    enc = ProxyEncoder(PROXY)
    feats = enc(["Rewrite the words in uppercase.\nhouse tiger", "Copy the last word.\nhouse tiger"])
    assert feats.shape == (2, 6 * 384)  # 6 MiniLM layers x 384
    assert np.isfinite(feats).all()


def test_gpt2_proxy_from_a_tiny_config_pools_the_last_token():
    """The paper's proxy is GPT-2 with last-token features (Sec. 4.5). Offline, a tiny GPT-2
    config with GPT-2's real BPE tokenizer stands in for the hub's ``gpt2`` weights."""
    import torch

    from lightning_fed.selection.features import resolve_proxy_path

    torch.manual_seed(0)
    config = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 64}
    enc = ProxyEncoder(config, tokenizer="gpt2-bpe")
    assert enc.pooling == "last" and ProxyEncoder(PROXY).pooling == "mean"  # decoder: last; encoder: mean
    texts = ["Copy the last word.\nhouse tiger", "Say hi."]
    feats = enc(texts)
    assert feats.shape == (2, 2 * 32)  # 2 layers x 32 hidden
    # By hand: the short text alone (no padding), layer l's state at its last token, concatenated.
    ids = enc.tokenizer(texts[1], return_tensors="pt")
    with torch.no_grad():
        hidden = enc.model(**ids, output_hidden_states=True).hidden_states
    expected = torch.cat([hidden[1][0, -1], hidden[2][0, -1]]).numpy()
    assert np.allclose(feats[1], expected, atol=1e-5)  # right padding in the batch changes nothing
    assert resolve_proxy_path("gpt2") == "gpt2"  # the paper's proxy stays a real hub id


def test_a_config_proxy_needs_a_tokenizer():
    import pytest

    with pytest.raises(ValueError, match="needs `proxy_tokenizer`"):
        ProxyEncoder({"model_type": "gpt2", "n_layer": 1, "n_embd": 8, "n_head": 2})
    with pytest.raises(ValueError, match="`proxy_pooling` must be one of"):
        ProxyEncoder(PROXY, pooling="max")
