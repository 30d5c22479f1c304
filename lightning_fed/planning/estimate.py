"""What a client needs in memory, and what a round moves, from the model's config alone.

The shape of the model comes from its transformers config: the model is built on the
``meta`` device (``accelerate.init_empty_weights``), which gives every parameter's shape and
every linear layer's name without allocating or loading a single weight, so a 7B config is
planned on a laptop. Bytes are then added up item by item (:class:`Plan`):

* ``weights``: the frozen backbone. Decoder linears at ``dtype``, or quantized (nf4: 4 bits
  plus the double-quantized absmax, 1/64 + 4/(64*256) bytes per weight; int8: 1 byte plus a
  float32 scale per output row); embeddings, norms and the LM head at ``dtype``, or float32
  when quantized (PEFT's k-bit preparation upcasts them).
* ``lora`` / ``lora_grads`` / ``optimizer``: the adapters (PEFT keeps them in float32),
  their gradients, and AdamW's two moments (none for SGD); the same for ``personal``
  (FedPDPO's personal LM head, bottleneck and reward head; FedPer/FedRep's head) at
  ``personal_dtype``.
* ``activations``: what the policy forward keeps for the backward pass, counted by running
  the forward of the model itself on the ``meta`` device with the run's LoRA adapters,
  batch and length (:func:`~lightning_fed.planning.activations.count_saved_activations`:
  the distinct storages ``torch.autograd.graph.saved_tensors_hooks`` sees, parameters
  excluded). With checkpointing: each layer's input plus one layer recomputed at a time.
  The preference objectives zero every dropout (their ``disable_dropout``), so they are
  counted without dropout: no masks, and GPT-2's attention on the fused kernel.
* ``logits``: two ``tokens x vocab`` float32 buffers at the backward peak, the logits (saved
  by :func:`~lightning_fed.modules.losses.selective_log_softmax`, which makes no log-softmax
  copy) and their gradient. Measured 2.0-2.6 buffers (tests/modules/test_losses.py: the excess
  is the forward's per-sequence logsumexp temporaries the allocator keeps, within ``runtime``);
  ``log_softmax`` + gather took 3. The no-grad reference forward of DPO (one example at a
  time on first sight, then cached) fits in the same peak.
* ``runtime``: a fixed allowance for the process itself (CUDA context and allocator slack on
  a GPU; Python, torch and transformers on a CPU), ``runtime_bytes``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from lightning_fed.modules.lora import DEFAULT_TARGET_MODULES
from lightning_fed.planning.activations import count_saved_activations

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
OBJECTIVES = ("sft", "dpo", "personal_head", "pdpo")
NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)
LOGIT_BUFFERS = 2
DEFAULT_RUNTIME_BYTES = 512 * 2**20
BACKBONE = "model.init_args.backbone"
LORA = "model.init_args.lora"
"""Where a config holds what the planner reads: its messages name the keys as the user writes them."""


@dataclass
class ModelShape:
    """Sizes of a causal LM read from its config (no weights)."""

    model_type: str
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    linears: dict[str, tuple[int, int]]
    """Every decoder linear by its full name: ``(in_features, out_features)``."""
    embedding_params: int
    lm_head_params: int
    """0 when the head is tied to the input embeddings."""
    other_params: int
    """Norms, biases and anything else outside the decoder linears and embeddings."""
    config: Any = None
    """The transformers config the shape was read from (the activations are counted on it)."""

    @property
    def linear_params(self) -> int:
        return sum(i * o for i, o in self.linears.values())

    @property
    def total_params(self) -> int:
        return self.linear_params + self.embedding_params + self.lm_head_params + self.other_params


@dataclass
class PlanInputs:
    """The run settings the estimate depends on."""

    batch_size: int = 4
    """Sequences per local step (preference pairs for DPO objectives)."""
    max_length: int = 512
    """Tokens per sequence (the estimate assumes full-length batches)."""
    lora_r: int = 8
    lora_targets: list[str] | None = None
    """LoRA target module names; default the package's per-model-type list."""
    lora_dropout: float = 0.05
    """LoRA dropout (``LoraSettings``' default); above 0 each target keeps a dropped copy of its input."""
    disable_dropout: bool | None = None
    """Every dropout of the model zeroed, LoRA's included (the preference modules'
    ``disable_dropout``); default ``None``: on for every objective but ``sft``, as those modules do."""
    objective: str = "dpo"
    """``sft`` (one forward), ``dpo`` (chosen + rejected), ``personal_head`` (DPO through a
    personal LM head: FedPer/FedRep), ``pdpo`` (plus bottleneck and reward head)."""
    dtype: str = "float32"
    quantization: str = "none"
    activation_checkpointing: bool = False
    optimizer: str = "adamw"
    personal_dtype: str = "float32"
    bottleneck_dim: int = 256
    reward_hidden: int = 256
    clients_per_round: int = 2
    scaffold: bool = False
    """SCAFFOLD sends a control variate the size of the shared state each way."""
    runtime_bytes: int = DEFAULT_RUNTIME_BYTES


@dataclass
class Plan:
    """Bytes per item of one client's peak memory, and per round of communication."""

    items: dict[str, int] = field(default_factory=dict)
    shared_bytes: int = 0
    personal_bytes: int = 0
    up_bytes_per_client: int = 0
    down_bytes_per_client: int = 0
    round_bytes: int = 0

    @property
    def total(self) -> int:
        return sum(self.items.values())


def model_shape_from_config(config: Any) -> ModelShape:
    """:class:`ModelShape` of a transformers ``PretrainedConfig``, via a meta-device model."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM
    from transformers.pytorch_utils import Conv1D

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(config)
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    tied = bool(getattr(config, "tie_word_embeddings", False)) or (head is not None and head.weight is embed.weight)
    skip = {id(embed.weight)} | ({id(head.weight)} if head is not None else set())
    linears, covered = {}, set()
    for name, module in model.named_modules():
        if module is head:
            continue
        if isinstance(module, nn.Linear):
            linears[name] = (module.in_features, module.out_features)
            covered.add(id(module.weight))
        elif isinstance(module, Conv1D):  # GPT-2: weight is (in, out)
            linears[name] = tuple(module.weight.shape)
            covered.add(id(module.weight))
    other = sum(p.numel() for p in model.parameters() if id(p) not in covered | skip)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = getattr(text, "hidden_size", None) or text.n_embd
    return ModelShape(
        model_type=config.model_type,
        vocab=embed.weight.shape[0],
        hidden=hidden,
        intermediate=getattr(text, "intermediate_size", None) or getattr(text, "n_inner", None) or 4 * hidden,
        layers=getattr(text, "num_hidden_layers", None) or text.n_layer,
        linears=linears,
        embedding_params=embed.weight.numel(),
        lm_head_params=0 if tied or head is None else head.weight.numel(),
        other_params=other,
        config=config,
    )


def model_shape(backbone: dict[str, Any]) -> ModelShape:
    """:class:`ModelShape` of a ``backbone:`` config section (``config`` dict or ``name_or_path``).

    ``name_or_path`` reads only the config: ``config.json`` of a local folder or the hub
    cache, or the metadata of a ``gguf:`` file (its dequantized cache when present).
    """
    from transformers import AutoConfig

    if backbone.get("config") is not None:
        kwargs = dict(backbone["config"])
        model_type = kwargs.pop("model_type")
        tokenizer = backbone.get("tokenizer") or "bytes"
        kwargs.setdefault("vocab_size", {"bytes": 259, "gpt2-bpe": 50257}.get(tokenizer, kwargs.get("vocab_size")))
        if kwargs["vocab_size"] is None:
            raise ValueError(f"{BACKBONE}.config: give vocab_size to plan with tokenizer {tokenizer!r}")
        return model_shape_from_config(AutoConfig.for_model(model_type, **kwargs))
    spec = backbone.get("name_or_path")
    if not spec:
        raise ValueError(f"{BACKBONE}: set name_or_path or config to plan a run")
    if spec.startswith("gguf:"):
        from lightning_fed.model_packages import cache_damage
        from lightning_fed.modules.backbone import _package_dir, _parse_gguf, default_cache_dir

        package, file = _parse_gguf(spec, f"{BACKBONE}.name_or_path")
        root = Path(backbone["cache_dir"]).expanduser() if backbone.get("cache_dir") else default_cache_dir()
        cached = root / "gguf" / package / Path(file).stem  # as gguf_cache lays it out
        if (cached / "config.json").is_file() and cache_damage(cached) is None:  # a damaged copy: fit rebuilds it
            return model_shape_from_config(AutoConfig.from_pretrained(cached))
        config = AutoConfig.from_pretrained(_package_dir(package, f"{BACKBONE}.name_or_path", spec), gguf_file=file)
        return model_shape_from_config(config)
    try:
        config = AutoConfig.from_pretrained(spec)
    except OSError as err:  # not a folder, not in the hub cache, and offline
        first = str(err).strip().splitlines()[0]
        raise ValueError(
            f"{BACKBONE}.name_or_path: no config.json for {spec!r} here ({first}); download it once or give "
            f"{BACKBONE}.config (the fields of its config.json) to plan offline"
        ) from err
    return model_shape_from_config(config)


def lora_params(shape: ModelShape, r: int, targets: list[str] | None) -> int:
    """LoRA parameters ``r (in + out)`` summed over the target linears."""
    targets = targets or DEFAULT_TARGET_MODULES.get(shape.model_type)
    if not targets:
        raise ValueError(f"{LORA}.target_modules: no default for model type {shape.model_type!r}; give them to plan")
    return sum(r * (i + o) for name, (i, o) in shape.linears.items() if name.rsplit(".", 1)[-1] in targets)


def _weight_bytes(shape: ModelShape, dtype: str, quantization: str) -> int:
    rest = shape.embedding_params + shape.lm_head_params + shape.other_params
    if quantization == "none":
        return (shape.linear_params + rest) * BYTES[dtype]
    if quantization == "nf4":
        linear = math.ceil(shape.linear_params * NF4_BYTES_PER_WEIGHT)
    elif quantization == "int8":
        linear = shape.linear_params + 4 * sum(o for _, o in shape.linears.values())
    else:
        raise ValueError(
            f"{BACKBONE}.quantization (or --quantization) must be one of ('none', 'nf4', 'int8'), got {quantization!r}"
        )
    return linear + 4 * rest  # k-bit preparation upcasts the rest to float32


def personal_params(shape: ModelShape, p: PlanInputs) -> int:
    """Parameters of one client's personal modules (0 for ``sft``/``dpo``)."""
    if p.objective in ("sft", "dpo"):
        return 0
    h = shape.hidden
    n = shape.vocab * h  # the personal LM head (an untied copy of the backbone's)
    if p.objective == "pdpo":
        b, rh = p.bottleneck_dim, p.reward_hidden
        n += (h * b + b) + (b * h + h) + 2 * h  # Encode, Decode, LayerNorm
        n += (h * rh + rh) + (rh + 1)  # reward MLP
    return n


def estimate(shape: ModelShape, p: PlanInputs, clients: int = 1) -> Plan:
    """Peak memory of one client's local step and the bytes of one round; see the module doc.

    ``clients`` above 1 counts the activations of ``p.batch_size`` split among that many clients
    trained together (the batching engine's forward); the rest of the plan is one client's
    (:func:`~lightning_fed.planning.group.estimate_group` builds the group's plan from it)."""
    if p.objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {p.objective!r}")
    if p.dtype not in BYTES or p.personal_dtype not in BYTES:
        raise ValueError(f"dtype and personal_dtype must be in {sorted(BYTES)}, got {p.dtype!r}, {p.personal_dtype!r}")
    moments = 2 if p.optimizer == "adamw" else 0
    lora = lora_params(shape, p.lora_r, p.lora_targets)
    personal = personal_params(shape, p)
    pbytes = BYTES[p.personal_dtype]
    seqs = p.batch_size * (1 if p.objective == "sft" else 2)
    tokens = seqs * p.max_length
    if shape.config is None:
        raise ValueError("planner: the model shape has no config to count activations on; use model_shape()")
    no_dropout = p.objective != "sft" if p.disable_dropout is None else p.disable_dropout
    saved = count_saved_activations(
        shape.config,
        seqs,
        p.max_length,
        p.lora_r,
        p.lora_targets,
        0.0 if no_dropout else p.lora_dropout,
        p.dtype,
        dropout=not no_dropout,
        clients=clients,
        row_copies=1 if p.objective == "sft" else 2,  # chosen rows, then rejected rows
    )
    activations = saved.checkpointed() if p.activation_checkpointing else saved.total
    activations += shared_prefix_scores(shape, p)
    plan = Plan()
    plan.items = {
        "weights": _weight_bytes(shape, p.dtype, p.quantization),
        "lora": 4 * lora,
        "lora_grads": 4 * lora,
        "personal": pbytes * personal,
        "personal_grads": pbytes * personal,
        "optimizer": moments * (4 * lora + pbytes * personal),
        "activations": int(activations),
        "logits": LOGIT_BUFFERS * tokens * shape.vocab * 4,
        "runtime": p.runtime_bytes,
    }
    plan.shared_bytes, plan.personal_bytes = 4 * lora, pbytes * personal
    factor = 2 if p.scaffold else 1
    plan.up_bytes_per_client = plan.down_bytes_per_client = factor * plan.shared_bytes
    plan.round_bytes = p.clients_per_round * (plan.up_bytes_per_client + plan.down_bytes_per_client)
    return plan


SHARED_PREFIX_MODELS = ("gpt2", "llama", "qwen2")
"""Model types whose DPO pairs run as one row ``[prompt | chosen | rejected]``
(:mod:`lightning_fed.modules.shared_prefix`)."""


def shared_prefix_scores(shape: ModelShape, p: PlanInputs) -> int:
    """The attention probabilities a shared-prefix DPO step keeps for backward: with its block
    mask, SDPA on CPU takes the math path, which saves the ``(pairs, heads, W, W)`` float32
    softmax of every layer (one layer under activation checkpointing), ``W`` at most
    ``2 * max_length`` (the prompt once, both responses). The saved-activation count runs the
    fused kernel and does not see it. Measured (tests/planning/test_group.py, tiny GPT-2, K = 1
    to 16): the peak grew 288 MiB against 197 MiB planned without this term."""
    if p.objective != "dpo" or getattr(shape.config, "model_type", None) not in SHARED_PREFIX_MODELS:
        return 0
    heads = int(getattr(shape.config, "num_attention_heads", 0) or 0)
    width = 2 * p.max_length
    layers = 1 if p.activation_checkpointing else shape.layers
    return 4 * p.batch_size * heads * width * width * layers


def objective_of(class_path: str) -> str:
    """The planner's ``objective`` of a module class (its path or name): how many forwards a step takes."""
    name = class_path.rsplit(".", 1)[-1]
    if name == "PDPOModule":
        return "pdpo"
    if name in ("FedPerModule", "FedRepModule", "PersonalHeadDPO"):
        return "personal_head"
    if "DPO" in name or name in ("PerFedAvgModule", "FedAMPModule"):
        return "dpo"
    return "sft"  # SFT, the binary selector and the offsite modules: one forward per example


def module_inputs(
    model_args: Mapping[str, Any],
    backbone: Mapping[str, Any],
    lora: Mapping[str, Any],
    *,
    batch_size: int,
    max_length: int,
    objective: str,
    dtype: str,
    **federation: Any,
) -> PlanInputs:
    """:class:`PlanInputs` from a model's arguments (``model.init_args`` or a module's
    hyper-parameters), its ``backbone`` and ``lora`` settings, and the data's batch shape;
    ``federation``: the run's fields of :class:`PlanInputs` (``clients_per_round``, ``scaffold``)."""
    return PlanInputs(
        batch_size=int(batch_size),
        max_length=int(max_length),
        lora_r=int(lora.get("r", 8)),
        lora_targets=lora.get("target_modules"),
        lora_dropout=float(lora.get("dropout", 0.05)),
        disable_dropout=model_args.get("disable_dropout"),
        objective=objective,
        dtype=dtype,
        quantization=backbone.get("quantization", "none"),
        activation_checkpointing=bool(backbone.get("activation_checkpointing", False)),
        optimizer=model_args.get("optimizer", "adamw"),
        personal_dtype=model_args.get("personal_dtype", "float32"),
        bottleneck_dim=int(model_args.get("bottleneck_dim", 256)),
        reward_hidden=int(model_args.get("reward_hidden", 256)),
        **federation,
    )
