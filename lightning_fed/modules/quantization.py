"""Fitting a large backbone: k-bit weights and activation checkpointing.

* ``quantization: nf4`` is QLoRA's 4-bit NormalFloat with double quantization (Dettmers et
  al., 2023, arXiv:2305.14314); ``int8`` is LLM.int8() (Dettmers et al., 2022,
  arXiv:2208.07339). Both go through bitsandbytes as transformers loads the weights, so the
  full-precision model is never materialised, and then through PEFT's
  ``prepare_model_for_kbit_training`` (frozen base, non-quantized parameters in float32),
  after which PEFT wraps each quantized linear in its own bitsandbytes LoRA layer.
* ``activation_checkpointing`` is transformers' gradient checkpointing in its non-reentrant
  form (``torch.utils.checkpoint(..., use_reentrant=False)``): decoder layers keep only
  their inputs and recompute the rest in the backward pass. The non-reentrant form
  propagates gradients to the LoRA weights inside a layer even when the layer's input does
  not require grad, so no ``enable_input_require_grads`` hook is needed.

Lightning's ``BitsandbytesPrecision`` plugin is not used: it swaps every ``nn.Linear`` of the
LightningModule at ``Trainer`` setup, i.e. after the backbone was loaded in full precision,
and it would also quantize LoRA's own ``lora_A``/``lora_B`` and the personal heads unless each
is listed in ``ignore_modules``.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

QUANTIZATIONS = ("none", "nf4", "int8")
CHECKPOINT_KWARGS = {"use_reentrant": False}


def bitsandbytes_config(kind: str, compute_dtype: torch.dtype) -> Any:
    """The transformers ``BitsAndBytesConfig`` for ``nf4`` or ``int8``.

    Args:
        kind: ``nf4`` (4-bit NormalFloat, double quantization) or ``int8``.
        compute_dtype: dtype of the matmuls of 4-bit layers (``backbone.dtype``).

    Raises:
        ValueError: If ``kind`` is unknown or bitsandbytes is not installed.
    """
    if kind not in QUANTIZATIONS[1:]:
        raise ValueError(f"backbone.quantization must be one of {QUANTIZATIONS}, got {kind!r}")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise ValueError(f"backbone.quantization={kind!r} needs bitsandbytes (pip install bitsandbytes)") from None
    from transformers import BitsAndBytesConfig

    if kind == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute_dtype,
    )


def quantized_device() -> str:
    """Where bitsandbytes quantizes: this process's GPU (``LOCAL_RANK``) if any, else the CPU."""
    if torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    return "cpu"


def load_quantized(path: str, kind: str, dtype: torch.dtype) -> PreTrainedModel:
    """Load a causal LM from ``path`` with its linear layers quantized to ``kind``.

    Args:
        path: A hub id or local model folder.
        kind: ``nf4`` or ``int8``.
        dtype: dtype of the non-quantized parameters and of the 4-bit compute.
    """
    return AutoModelForCausalLM.from_pretrained(
        path,
        dtype=dtype,
        quantization_config=bitsandbytes_config(kind, dtype),
        device_map={"": quantized_device()},
    )


def quantize_built(model: PreTrainedModel, kind: str, dtype: torch.dtype) -> PreTrainedModel:
    """Quantize a model built from a config (random weights): save it, reload it quantized."""
    with tempfile.TemporaryDirectory(prefix="lightning_fed_quantize_") as tmp:
        model.save_pretrained(tmp)
        quantized = load_quantized(tmp, kind, dtype)
    # Not the deleted folder (PEFT looks it up when saving an adapter).
    quantized.config.name_or_path = quantized.name_or_path = model.config.name_or_path
    return quantized


def prepare_for_training(model: PreTrainedModel, quantization: str, activation_checkpointing: bool) -> PreTrainedModel:
    """Freeze and prepare a loaded backbone for adapter training.

    Args:
        model: The loaded causal LM (quantized when ``quantization`` is not ``none``).
        quantization: ``none``, ``nf4`` or ``int8``.
        activation_checkpointing: Recompute decoder-layer activations in the backward pass.

    Raises:
        ValueError: If checkpointing is asked of a model type that does not support it.
    """
    if activation_checkpointing and not model.supports_gradient_checkpointing:
        raise ValueError(
            f"backbone.activation_checkpointing: model type {model.config.model_type!r} "
            "does not support gradient checkpointing"
        )
    if quantization != "none":
        from peft import prepare_model_for_kbit_training

        # Checkpointing is switched on below, the same way for both paths.
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    if activation_checkpointing:
        kwargs = dict(CHECKPOINT_KWARGS)
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return model


def is_quantized(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds bitsandbytes 4-bit or 8-bit linear layers."""
    return bool(getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False))
