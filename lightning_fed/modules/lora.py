"""LoRA adapters on the frozen backbone (Hu et al., 2021, arXiv:2106.09685), through PEFT.

:func:`is_adapter_param` is the one place that decides which parameters belong to an
adapter; freezing, the federated exchange and checkpoints all use it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn
from transformers import PreTrainedModel
from transformers.pytorch_utils import Conv1D

from lightning_fed.option_rules import LORA, target_modules_problem
from lightning_fed.option_rules import problems as rule_problems

_LLAMA_LIKE = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

DEFAULT_TARGET_MODULES: dict[str, list[str]] = {
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    **{
        model_type: list(_LLAMA_LIKE)
        for model_type in (
            "llama",
            "mistral",
            "qwen2",
            "qwen3",
            "gemma",
            "gemma2",
            "gemma3_text",
            "olmo2",
            "smollm3",
        )
    },
    # Phi-3 fuses q/k/v and gate/up into single projections.
    "phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
    "gpt_neox": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
    "opt": ["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"],
}
"""LoRA target modules per ``config.model_type``: every linear map of attention and MLP."""

_LINEAR_LIKE = (nn.Linear, Conv1D)


@dataclass
class LoraSettings:
    """Shape of the LoRA adapters: ``W + (alpha / r) * B A`` on each target module."""

    r: int = 8
    """Rank of the update ``B A``."""

    alpha: float = 16
    """Scaling numerator; the update is multiplied by ``alpha / r``."""

    dropout: float = 0.05
    """Dropout on the adapter input during training, in [0, 1)."""

    target_modules: list[str] | None = None
    """Names (last path component) of the modules to adapt. Default: the entry of
    ``DEFAULT_TARGET_MODULES`` for the model type."""

    def __post_init__(self) -> None:
        problems = rule_problems(LORA, {"r": self.r, "alpha": self.alpha, "dropout": self.dropout})
        if problem := target_modules_problem(self.target_modules):
            problems.append(problem)
        if problems:
            raise ValueError("; ".join(problems))


def is_adapter_param(name: str) -> bool:
    """Whether parameter ``name`` belongs to an adapter (and so is trained and shared)."""
    return "lora_" in name


def lora_config(model: nn.Module, settings: LoraSettings) -> LoraConfig:
    """The PEFT config for ``settings`` on ``model``, after checking the target modules.

    Args:
        model: The (base) causal LM the adapter is for.
        settings: Rank, scaling, dropout and targets.

    Returns:
        A ``LoraConfig`` for causal language modelling.

    Raises:
        ValueError: If a target module is missing from the model, or the model type has no
            default targets and none are given.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    candidates = linear_module_names(model)
    targets = settings.target_modules
    if targets is None:
        if model_type not in DEFAULT_TARGET_MODULES:
            raise ValueError(
                f"model.lora.target_modules: no default for model type {model_type!r}; set "
                f"model.lora.target_modules to some of its Linear-like modules: {', '.join(candidates)}"
            )
        targets = DEFAULT_TARGET_MODULES[model_type]
    names = [name for name, _ in _base_modules(model)]
    missing = [t for t in targets if not any(n == t or n.endswith(f".{t}") for n in names)]
    if missing:
        raise ValueError(
            f"model.lora.target_modules: model type {model_type!r} has no module named "
            f"{', '.join(map(repr, missing))} (Linear-like modules it has: {', '.join(candidates)})"
        )
    # A rank above every target's full rank adds nothing and allocates r x (in + out) per
    # layer: `lora.r: 1e8` would fail in the allocator, naming no option (issue 22).
    full = max((_full_rank(m) for n, m in _base_modules(model) if n.rsplit(".", 1)[-1] in targets), default=None)
    if full is not None and settings.r > full:
        raise ValueError(
            f"model.lora.r must be <= {full} (the full rank of the largest target module), got {settings.r}"
        )
    # GPT-2 style Conv1D stores its weight transposed; tell PEFT instead of letting it warn.
    fan_in_fan_out = any(
        isinstance(module, Conv1D) and name.rsplit(".", 1)[-1] in targets for name, module in _base_modules(model)
    )
    return LoraConfig(
        task_type="CAUSAL_LM",
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(targets),
        fan_in_fan_out=fan_in_fan_out,
        bias="none",
    )


def apply_lora(model: PreTrainedModel, settings: LoraSettings, adapter_name: str = "default") -> PeftModel:
    """Wrap ``model`` with a LoRA adapter; only adapter parameters stay trainable.

    The model is modified in place (PEFT injects the adapter layers into it); keep a deep
    copy first if the plain model is still needed. Inside ``peft_model.disable_adapter()``
    the forward pass is the base model's.

    Args:
        model: The causal LM.
        settings: Rank, scaling, dropout and targets.
        adapter_name: Name of the adapter in the PEFT model.

    Returns:
        The PEFT model.
    """
    peft_model = get_peft_model(model, lora_config(model, settings), adapter_name=adapter_name)
    for name, param in peft_model.named_parameters():
        param.requires_grad_(is_adapter_param(name))
    return peft_model


def add_adapter(peft_model: PeftModel, settings: LoraSettings, adapter_name: str) -> None:
    """Add a second, independently initialised LoRA adapter to the same base model.

    As in PEFT, the new adapter is neither active nor trainable until
    ``peft_model.set_adapter(adapter_name)`` (which freezes the others).

    Args:
        peft_model: A model returned by :func:`apply_lora`.
        settings: Rank, scaling, dropout and targets of the new adapter.
        adapter_name: Its name; must not be in use.

    Raises:
        ValueError: If the name is taken or a target module is missing.
    """
    if adapter_name in peft_model.peft_config:
        raise ValueError(
            f"adapter_name {adapter_name!r} is already used; existing adapters: {sorted(peft_model.peft_config)}"
        )
    peft_model.add_adapter(adapter_name, lora_config(peft_model.get_base_model(), settings))


def linear_module_names(model: nn.Module) -> list[str]:
    """Sorted distinct last path components of the Linear-like modules of ``model``."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in _base_modules(model) if isinstance(m, _LINEAR_LIKE)})


def _full_rank(module: nn.Module) -> int:
    """min(in, out) of a Linear-like layer (a quantized Linear's packed weight has another shape)."""
    if hasattr(module, "in_features") and hasattr(module, "out_features"):
        return min(module.in_features, module.out_features)
    return min(module.weight.shape)  # Conv1D: (in, out)


def _base_modules(model: nn.Module):
    """Named modules as in the plain model: an injected adapter layer yields its base layer."""
    for name, module in model.named_modules():
        parts = name.split(".")
        if any(is_adapter_param(p) or p == "base_layer" for p in parts):
            continue
        yield name, getattr(module, "base_layer", module)


@contextmanager
def adapters_disabled(layers: Sequence[BaseTunerLayer]) -> Iterator[None]:
    """Run the base model without its adapters: the DPO reference, cheaply.

    PEFT's ``PeftModel.disable_adapter()`` also inspects the model and toggles
    ``requires_grad`` on every adapter weight on entry and exit, which costs ~13% of a
    SmolLM2 DPO step (benchmarks/RESULTS.md). Only the forward's ``_disable_adapters`` flag
    matters here: callers use this under ``torch.no_grad()``.

    Args:
        layers: The model's adapter layers (see :func:`adapter_layers`).
    """
    previous = [layer._disable_adapters for layer in layers]
    for layer in layers:
        layer._disable_adapters = True
    try:
        yield
    finally:
        for layer, flag in zip(layers, previous):
            layer._disable_adapters = flag


def adapter_layers(model: nn.Module) -> list[BaseTunerLayer]:
    """The PEFT adapter layers of ``model``, in module order."""
    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
