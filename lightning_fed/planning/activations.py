"""The bytes autograd saves in a forward pass, counted on the ``meta`` device.

The backward pass needs some tensors of the forward: a linear layer keeps its input, a SiLU
its input, RMSNorm its input and the inverse root mean square, attention its queries, keys,
values, output and log-sum-exp. What is kept depends on the model's code (transformers'
modelling file), on the adapters (a LoRA ``A`` keeps its input; dropout before it keeps a
mask and a dropped copy) and on the dtype (RMSNorm upcasts to float32). Instead of a formula
per architecture, :func:`count_saved_activations` runs the forward of the actual model, built
from its config on the ``meta`` device (shapes only: no byte is allocated, so a 7B config is
counted on a laptop in about a second), with the run's LoRA adapters attached, under
``torch.autograd.graph.saved_tensors_hooks``, and adds up the distinct storages handed to the
hook that are not parameters, per decoder layer. Decoder layers have one shape, so the
forward runs through two of them (the first, whose input comes from the frozen embedding and
needs no gradient, and one more), and the second stands for all the others.

One substitution: on ``meta`` PyTorch's ``scaled_dot_product_attention`` falls back to the
math kernel, which keeps the ``T x T`` attention matrix. The kernels a CPU or GPU run uses
(flash / memory-efficient attention, ``_scaled_dot_product_flash_attention_for_cpu`` on CPU)
keep only ``q``, ``k``, ``v``, the output and the ``(B, heads, T)`` log-sum-exp, so the count
uses a stand-in that keeps exactly those (:class:`_FusedAttention`). With attention dropout
(GPT-2's ``attn_pdrop``) the CPU runs the math kernel, and so does the count.

Assumptions: full-length sequences (no padding: the attention mask is not materialised) and
the module's training mode (dropout active).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.multiprocessing.reductions import StorageWeakRef

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class SavedActivations:
    """Bytes of the distinct non-parameter storages autograd keeps after one forward."""

    per_layer: list[int]
    """Saved by each decoder layer, in order."""
    outside: int
    """Saved outside the decoder layers: embeddings, the final norm, the LM head's input."""
    layer_input: int
    """Bytes of one decoder layer's input (``tokens x hidden`` at the model's dtype): what
    activation checkpointing keeps per layer."""

    @property
    def total(self) -> int:
        return sum(self.per_layer) + self.outside

    def checkpointed(self) -> int:
        """What stays with activation checkpointing: every layer's input, the largest layer
        recomputed during the backward, and what is saved outside the layers."""
        return len(self.per_layer) * self.layer_input + max(self.per_layer, default=0) + self.outside


class _FusedAttention(torch.autograd.Function):
    """Stand-in for a fused attention kernel: keeps ``q, k, v``, the output and the log-sum-exp."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


@contextmanager
def _fused_attention() -> Iterator[None]:
    original = nn.functional.scaled_dot_product_attention

    def _fused_sdpa(query: Tensor, key: Tensor, value: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        dropout = kwargs.get("dropout_p", args[1] if len(args) > 1 else 0.0)
        if dropout:  # PyTorch's CPU flash kernel has no dropout: it runs the math kernel, as meta does
            return original(query, key, value, *args, **kwargs)
        return _FusedAttention.apply(query, key, value)

    nn.functional.scaled_dot_product_attention = _fused_sdpa
    try:
        yield
    finally:
        nn.functional.scaled_dot_product_attention = original


def _decoder_layers(model: nn.Module, n_layers: int) -> nn.ModuleList:
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == n_layers:
            return module
    raise ValueError(f"planner: no list of {n_layers} decoder layers in {type(model).__name__}")


def _stack_clients(model: nn.Module, sequences: int, clients: int) -> Any:
    """Stack ``model``'s adapters over ``clients`` slots, the step's ``sequences`` rows split evenly."""
    from lightning_fed.batching.client_rows import ClientRows
    from lightning_fed.batching.multi_lora import StackedLora

    if sequences % clients:
        raise ValueError(f"planner: {sequences} sequences do not split evenly among {clients} clients")
    per_client = sequences // clients  # each client's rows together, in slot order: the engine's usual step
    rows = ClientRows.of([k for k in range(clients) for _ in range(per_client)], clients, torch.device("meta"))
    shared = {n: p for n, p in model.named_parameters() if p.requires_grad}
    stacked = StackedLora(model, shared, lambda: rows)
    for _ in range(clients):
        stacked.capture()
    stacked.stack()
    return stacked


def count_saved_activations(
    config: Any,
    sequences: int,
    length: int,
    lora_r: int = 8,
    lora_targets: list[str] | None = None,
    lora_dropout: float = 0.0,
    dtype: str = "float32",
    dropout: bool = True,
    clients: int = 1,
    row_copies: int = 1,
) -> SavedActivations:
    """Bytes autograd keeps after the forward of ``sequences x length`` tokens through the model.

    Args:
        config: The model's transformers ``PretrainedConfig``.
        sequences: Sequences in the forward (``2 x pairs`` for a concatenated DPO forward).
        length: Tokens per sequence.
        lora_r: LoRA rank of the adapters attached to ``lora_targets``.
        lora_targets: Target module names; default the package's list for the model type.
        lora_dropout: LoRA dropout (each target then keeps a mask and a dropped copy of its input).
        dtype: The backbone's dtype (``float32``, ``bfloat16``, ``float16``).
        dropout: Whether the backbone's dropout is active; ``False`` counts the model as the
            preference objectives train it (``disable_dropout``: every dropout zeroed, LoRA's
            included, so GPT-2's attention runs the fused kernel and no mask is kept).
        clients: Clients trained together (``federation.batch_clients``): above 1 the adapters
            are stacked over ``clients`` slots and the layers run the batching engine's forward
            (:mod:`lightning_fed.batching.multi_lora`) on its usual step: the ``sequences`` split
            evenly among the clients, each client's rows together (a segmented matmul over the
            clients, whose regrouped inputs it keeps).
        row_copies: With ``clients``: the forward's rows are this many copies of the step's rows
            (2 for a preference step: its pairs' chosen rows, then their rejected rows).

    Returns:
        The saved bytes per decoder layer and outside the layers.
    """
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from lightning_fed.modules.lora import LoraSettings, lora_config

    config = copy.deepcopy(config)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    all_layers = getattr(text, "num_hidden_layers", None) or text.n_layer
    hidden = getattr(text, "hidden_size", None) or text.n_embd
    n_layers = min(all_layers, 2)
    text.num_hidden_layers = n_layers  # GPT-2's config maps it to n_layer
    # Full-length sequences, no padding: GPT-2's forward looks for a pad token in the ids (an
    # .item() that meta tensors cannot give) when the config names one, as a loaded backbone's does.
    text.pad_token_id = None
    if isinstance(getattr(text, "layer_types", None), list):
        text.layer_types = text.layer_types[:n_layers]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype])
        settings = LoraSettings(r=lora_r, alpha=2 * lora_r, dropout=lora_dropout, target_modules=lora_targets)
        model = get_peft_model(model, lora_config(model, settings))
    if not dropout:
        from lightning_fed.modules.preference import zero_dropout

        zero_dropout(model)
    model.train()
    stacked = _stack_clients(model, sequences // row_copies, clients) if clients > 1 else None
    params = {StorageWeakRef(t.untyped_storage()).cdata for t in [*model.parameters(), *model.buffers()]}
    layers = _decoder_layers(model, n_layers)
    where = {"layer": None}
    seen: dict[int, tuple[int | None, int]] = {}
    kept = []  # a freed storage's address could be reused: keep every saved tensor until counted

    def pack(t: Tensor) -> Tensor:
        key = StorageWeakRef(t.untyped_storage()).cdata
        if key not in params and key not in seen:
            seen[key] = (where["layer"], t.untyped_storage().nbytes())
            kept.append(t)
        return t

    handles = []
    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(lambda m, a, i=i: where.__setitem__("layer", i)))
        handles.append(layer.register_forward_hook(lambda m, a, o: where.__setitem__("layer", None)))
    ids = torch.zeros(sequences, length, dtype=torch.long, device="meta")
    try:
        with _fused_attention(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(input_ids=ids)
    finally:
        for handle in handles:
            handle.remove()
        if stacked is not None:
            stacked.unstack()
    counted = [0] * n_layers
    outside = 0
    for layer, nbytes in seen.values():
        if layer is None:
            outside += nbytes
        else:
            counted[layer] += nbytes
    per_layer = counted + counted[-1:] * (all_layers - n_layers)
    layer_input = sequences * length * hidden * DTYPES[dtype].itemsize
    return SavedActivations(per_layer=per_layer, outside=outside, layer_input=layer_input)
