"""Saved-activation counting on the meta device: by hand on a tiny Llama, and against real tensors."""

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from transformers import AutoConfig, AutoModelForCausalLM

from lightning_fed.planning.activations import count_saved_activations
from tests.planning.tiny_llama import TINY_LLAMA

TINY_GPT2 = {"n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 64, "vocab_size": 50}


def test_tiny_llama_saved_bytes_by_hand():
    cfg = AutoConfig.for_model("llama", **TINY_LLAMA)
    saved = count_saved_activations(cfg, sequences=3, length=5, lora_r=2, lora_dropout=0.0)
    h, kv, i, r, heads, tokens, head_dim = 8, 4, 16, 2, 2, 15, 4
    # Values kept per token by a decoder layer whose input needs grad (float32, LoRA on all 7 linears,
    # frozen base weights, so a base linear keeps nothing and each LoRA keeps A's input and B's input):
    per_token = sum(
        [
            h + 1,  # input RMSNorm: its input and the inverse root mean square
            h + 3 * r,  # q/k/v: the normed input (shared by the three A's), three A outputs
            h + 2 * kv,  # attention: q after RoPE, k and v (copied by the cache's cat)
            h + heads,  # attention: output and log-sum-exp (what a fused kernel keeps)
            r,  # o_proj A output (its A input is the attention output, already counted)
            h + 1,  # post-attention RMSNorm: the residual sum and its inverse rms
            h + 2 * r,  # gate/up: the normed input, two A outputs
            4 * i,  # SiLU's input (gate), up, SiLU's output, and down's input (their product)
            r,  # down_proj A output
        ]
    )
    assert per_token == 6 * h + 2 * kv + 4 * i + 7 * r + heads + 2 == 138
    assert saved.per_layer[1] == 4 * tokens * per_token == 8280
    # Layer 0's input is the frozen embedding's output (needs no grad): its RMSNorm keeps nothing,
    # but RoPE's cos and sin (1 x 1 x T x head_dim each) are first kept there.
    assert saved.per_layer[0] == 8280 - 4 * tokens * (h + 1) + 4 * 2 * 5 * head_dim == 7900
    assert saved.outside == 4 * tokens * (h + 1)  # the final RMSNorm; the frozen LM head keeps nothing
    assert saved.total == 7900 + 8280 + 540
    assert saved.layer_input == 4 * tokens * h
    assert saved.checkpointed() == 2 * 480 + 8280 + 540


def _real_saved_bytes(model_type, config, sequences, length, dropout, dtype=torch.float32, zeroed=False):
    """The same count on real CPU tensors with PyTorch's own attention kernel."""
    from peft import get_peft_model

    from lightning_fed.modules.lora import LoraSettings, lora_config
    from lightning_fed.modules.preference import zero_dropout

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **config), dtype=dtype)
    model = get_peft_model(model, lora_config(model, LoraSettings(r=2, dropout=dropout)))
    if zeroed:
        zero_dropout(model)
    model.train()
    params = {StorageWeakRef(t.untyped_storage()).cdata for t in [*model.parameters(), *model.buffers()]}
    seen, kept = {}, []

    def pack(t):
        key = StorageWeakRef(t.untyped_storage()).cdata
        if key not in params and key not in seen:
            seen[key] = t.untyped_storage().nbytes()
            kept.append(t)
        return t

    ids = torch.randint(0, config.get("vocab_size", 10), (sequences, length))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids).logits.sum().backward()
    return sum(seen.values())


@pytest.mark.parametrize(("model_type", "config"), [("llama", TINY_LLAMA), ("gpt2", TINY_GPT2)])
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_meta_count_equals_real_tensors(model_type, config, dropout):
    """The meta-device count, fused-attention stand-in included, is what a real CPU forward keeps."""
    meta = count_saved_activations(AutoConfig.for_model(model_type, **config), 3, 16, lora_r=2, lora_dropout=dropout)
    assert meta.total == _real_saved_bytes(model_type, config, 3, 16, dropout)


def test_meta_count_equals_real_tensors_bfloat16():
    """bfloat16 weights: PEFT keeps the adapters in float32 and casts their inputs; RMSNorm upcasts."""
    cfg = AutoConfig.for_model("llama", **TINY_LLAMA)
    meta = count_saved_activations(cfg, 3, 16, lora_r=2, lora_dropout=0.1, dtype="bfloat16")
    assert meta.total == _real_saved_bytes("llama", TINY_LLAMA, 3, 16, 0.1, torch.bfloat16)
    assert meta.total > count_saved_activations(cfg, 3, 16, lora_r=2, lora_dropout=0.1).total / 2


def test_meta_count_without_dropout_equals_real_tensors_of_a_preference_module():
    """GPT-2 with its dropout zeroed as the DPO modules do (``disable_dropout``): no masks, no
    dropped copies, and the fused attention kernel instead of the math kernel's T x T matrix."""
    cfg = AutoConfig.for_model("gpt2", **TINY_GPT2)  # attn_pdrop, resid_pdrop, embd_pdrop 0.1
    zeroed = count_saved_activations(cfg, 3, 16, lora_r=2, lora_dropout=0.1, dropout=False)
    assert zeroed.total == _real_saved_bytes("gpt2", TINY_GPT2, 3, 16, 0.1, zeroed=True)
    assert zeroed.total == count_saved_activations(cfg, 3, 16, lora_r=2, lora_dropout=0.0, dropout=False).total
    assert zeroed.total < count_saved_activations(cfg, 3, 16, lora_r=2, lora_dropout=0.0).total


def test_meta_count_of_clients_trained_together_equals_real_tensors():
    """The batching engine's usual step: adapters stacked over 3 clients, 2 pairs each, the forward
    over the pairs' chosen rows then their rejected rows (two copies of the step's rows), each
    layer one segmented matmul over the clients, which keeps each target's regrouped input (a copy
    per target: q, k and v no longer share theirs)."""
    from peft import get_peft_model

    from lightning_fed.batching.client_rows import ClientRows
    from lightning_fed.batching.multi_lora import StackedLora
    from lightning_fed.modules.lora import LoraSettings, lora_config

    cfg = AutoConfig.for_model("llama", **TINY_LLAMA)
    meta = count_saved_activations(cfg, 12, 16, lora_r=2, clients=3, row_copies=2)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **TINY_LLAMA))
    model = get_peft_model(model, lora_config(model, LoraSettings(r=2, dropout=0.0)))
    model.train()
    rows = ClientRows.of([0, 0, 1, 1, 2, 2], 3)
    assert rows.per_client == 2  # the usual step, not the per-row gather
    stacked = StackedLora(model, {n: p for n, p in model.named_parameters() if p.requires_grad}, lambda: rows)
    for _ in range(3):
        stacked.capture()
    stacked.stack()
    params = {StorageWeakRef(t.untyped_storage()).cdata for t in [*model.parameters(), *model.buffers()]}
    seen, kept = {}, []

    def pack(t):
        key = StorageWeakRef(t.untyped_storage()).cdata
        if key not in params and key not in seen:
            seen[key] = t.untyped_storage().nbytes()
            kept.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=torch.randint(0, 10, (12, 16))).logits.sum().backward()
    assert meta.total == sum(seen.values())
    assert meta.total > count_saved_activations(cfg, 12, 16, lora_r=2).total  # one adapter's forward
