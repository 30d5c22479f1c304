"""The model a finished run trained, rebuilt for evaluation: backbone + its global adapter.

``lightning-fed evaluate`` takes either a run or a base model:

* a run's version folder (``runs/.../version_N``, with the ``config.yaml`` the CLI saved and the
  ``adapter/`` folder the :class:`~lightning_fed.callbacks.FederatedLoop` wrote at the end of
  fit; a run stopped before its end has no adapter and its ``checkpoints/last.ckpt`` is used);
* a run's adapter folder, or a Lightning checkpoint (``.ckpt``) of a run: the federation's
  global state when it has one, else the module's trainable state;
* a base model by name (``model``: hub id, local folder, ``gguf:<package>/<file.gguf>``), with
  an optional PEFT adapter folder (``adapter``).

A backbone built from ``backbone.config`` has random weights that are not saved with the
adapters; it is rebuilt by :func:`~lightning_fed.modules.backbone.load_backbone` right after
seeding the torch RNG with the run's ``seed_everything``, as the CLI did before building the
module, so the evaluated backbone is the trained one. Checkpoints are read with
``weights_only=True``.

What is evaluated is the causal LM with the run's global LoRA adapter (FedIT, FedDPO, the
server algorithms, a FedBis policy). Parts that are not a LoRA of the LM (FedPDPO's personal
heads and bottleneck, FedBiOT's emulator layout) are not part of it: ``lightning-fed test``
scores those methods client by client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from lightning_fed.errors import CheckpointError
from lightning_fed.evaluation.model_source import ModelSource
from lightning_fed.federation.checkpoint_io import read_checkpoint
from lightning_fed.federation.state_check import check_state, named
from lightning_fed.modules.adapter_files import ADAPTER_CONFIG, ADAPTER_WEIGHTS, read_adapter_weights
from lightning_fed.modules.adapter_files import check_shapes as check_adapter_state
from lightning_fed.modules.backbone import BackboneConfig, load_backbone
from lightning_fed.modules.lora import LoraSettings, apply_lora


@dataclass
class LoadedModel:
    """The model to evaluate and where its results go."""

    model: torch.nn.Module
    """The causal LM, PEFT-wrapped when an adapter was applied, in eval mode."""

    tokenizer: Any
    """Its tokenizer."""

    output_dir: Path | None
    """The run folder (results are written next to the run), or ``None`` for a bare model."""

    description: dict[str, Any] = field(default_factory=dict)
    """What was loaded (paths, backbone, seed), written into the results."""

    run_config: dict[str, Any] = field(default_factory=dict)
    """The run's ``config.yaml`` (empty for a bare model)."""


def load_model(source: ModelSource) -> LoadedModel:
    """Build the model ``source`` names.

    Raises:
        ValueError: One line naming the option, if the run, checkpoint or adapter does not fit.
    """
    if source.model is not None:
        backbone = BackboneConfig(name_or_path=source.model, tokenizer=source.tokenizer, dtype=source.dtype)
        model, tokenizer = load_backbone(backbone)
        description = {"model": source.model}
        if source.adapter is not None:
            model = _apply_adapter_folder(model, Path(source.adapter).expanduser(), "--adapter")
            description["adapter"] = str(Path(source.adapter).expanduser().resolve())
        model.eval()
        return LoadedModel(model, tokenizer, None, description)
    path = Path(source.run).expanduser().resolve()
    if path.is_file():
        return _from_checkpoint(
            path, path.parent.parent if path.parent.name == "checkpoints" else path.parent, source.seed
        )
    if (path / ADAPTER_CONFIG).is_file():
        return _from_adapter(path, path.parent, source.seed)
    if (path / "adapter" / ADAPTER_CONFIG).is_file():
        return _from_adapter(path / "adapter", path, source.seed)
    if (path / "checkpoints" / "last.ckpt").is_file():
        return _from_checkpoint(path / "checkpoints" / "last.ckpt", path, source.seed)
    raise ValueError(
        f"--run {source.run!r}: neither a run folder (with adapter/ or checkpoints/last.ckpt), an adapter folder nor a "
        ".ckpt"
    )


def run_config(run_dir: Path) -> dict[str, Any]:
    """The ``config.yaml`` the CLI saved in ``run_dir`` (empty when there is none)."""
    config = run_dir / "config.yaml"
    return (yaml.safe_load(config.read_text()) or {}) if config.is_file() else {}


def run_prompt_format(config: dict[str, Any]) -> tuple[str | None, str | None]:
    """How the run formatted its prompts: ``(data.template, data.system_prompt)`` of its config.

    The template is returned only when it is a policy prompt template (``alpaca``, ``plain``,
    ``chat``): a selector run's ``shp``/``tldr``/``short`` is not a prompt the evaluated model
    answers. Both are ``None`` for a bare ``--model`` (no config).
    """
    from lightning_fed.datamodules.templates import TEMPLATE_CHOICES

    data = config.get("data") or {}
    args = data.get("init_args") or {}
    template = args.get("template")
    return (template if template in TEMPLATE_CHOICES else None), args.get("system_prompt")


def build_backbone(backbone: BackboneConfig | dict, seed: int | None) -> tuple[torch.nn.Module, Any]:
    """:func:`load_backbone`, seeded as the CLI seeds a run before building its module.

    The global RNG is left as it was.
    """
    backbone = BackboneConfig(**backbone) if isinstance(backbone, dict) else backbone
    if backbone.config is None:
        return load_backbone(backbone)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0 if seed is None else seed)
        return load_backbone(backbone)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _config_backbone(config: dict[str, Any]) -> dict[str, Any] | None:
    model = config.get("model") or {}
    return (model.get("init_args") or model).get("backbone")


def _from_adapter(adapter: Path, run_dir: Path, seed: int | None) -> LoadedModel:
    config = run_config(run_dir)
    backbone = _config_backbone(config)
    if not backbone:
        raise ValueError(
            f"--run {str(adapter)!r}: no config.yaml with model.init_args.backbone beside it; use --model and --adapter"
        )
    seed = seed if seed is not None else _int_or_none(config.get("seed_everything"))
    model, tokenizer = build_backbone(backbone, seed)
    model = _apply_adapter_folder(model, adapter, "--run")
    model.eval()
    description = {"run": str(run_dir), "adapter": str(adapter), "backbone": backbone, "seed": seed}
    return LoadedModel(model, tokenizer, run_dir, description, config)


def _apply_adapter_folder(model: torch.nn.Module, adapter: Path, flag: str) -> torch.nn.Module:
    """``model`` with the PEFT adapter in ``adapter``, whose weights must be exactly the adapter's:
    PEFT only warns about a missing tensor (left at its random start) and ignores one for a
    layer the model does not have."""
    from peft import PeftModel, get_peft_model_state_dict

    weights_path = adapter / ADAPTER_WEIGHTS
    weights = read_adapter_weights(weights_path, flag) if weights_path.is_file() else None
    try:
        model = PeftModel.from_pretrained(model, str(adapter))
    except (ValueError, RuntimeError, KeyError) as err:
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise ValueError(f"{flag} {str(adapter)!r}: the adapter does not fit the model: {first}") from None
    if weights is not None:
        expected = get_peft_model_state_dict(model)
        check_adapter_state(weights, expected, flag, weights_path)
    return model


def _from_checkpoint(path: Path, run_dir: Path, seed: int | None) -> LoadedModel:
    ckpt = read_checkpoint(path, "--run")
    hp = ckpt.get("hyper_parameters") or {}
    config = run_config(run_dir)
    backbone = hp.get("backbone") or _config_backbone(config)
    if not backbone:
        raise ValueError(
            f"--run {str(path)!r}: the checkpoint has no backbone hyper-parameter and no config.yaml beside the run"
        )
    if isinstance(backbone, BackboneConfig):
        backbone = {k: getattr(backbone, k) for k in ("name_or_path", "config", "tokenizer", "dtype", "cache_dir")}
    if seed is None:  # the FederatedLoop's callback state records the run's seed
        callbacks = (ckpt.get("callbacks") or {}).values()
        seed = next((s["seed"] for s in callbacks if isinstance(s, dict) and "seed" in s), None)
        seed = seed if seed is not None else _int_or_none(config.get("seed_everything"))
    module_args = hp if "lora" in hp else _config_module_args(config)
    lora = module_args.get("lora")
    lora = LoraSettings(**lora) if isinstance(lora, dict) else (lora or LoraSettings())
    model, tokenizer = build_backbone(backbone, seed)
    model = apply_lora(model, lora)
    section, state = _checkpoint_adapter(ckpt, path)
    params = {f"model.{k}": v for k, v in model.named_parameters() if "lora_" in k}
    check_state(
        state,
        params,
        named("--run", path, section),
        required=[k for k in params if not _personal(module_args, k)],
        exact_dtype=section == "federation.global_state",
        unknown="LoRA weight of this model",
        hint="evaluate a checkpoint of the run whose config.yaml is beside it",
    )
    model_params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in state.items():
            model_params[name.removeprefix("model.")].copy_(value)
    model.eval()
    description = {"run": str(run_dir), "checkpoint": str(path), "backbone": backbone, "seed": seed}
    return LoadedModel(model, tokenizer, run_dir, description, config)


def _config_module_args(config: dict[str, Any]) -> dict[str, Any]:
    """The module's init args in a run's ``config.yaml``, with its class path as ``_class_path``
    (as Lightning's ``hyper_parameters`` hold them)."""
    model = config.get("model") or {}
    args = dict(model.get("init_args") or {})
    return {**args, "_class_path": model.get("class_path")} if "class_path" in model else args


def _checkpoint_adapter(ckpt: dict[str, Any], path: Path) -> tuple[str, Any]:
    """The LoRA weights a checkpoint holds, and where: the federation's global state when the
    checkpoint has one (what the run ended with), else the module's ``state_dict`` (its adapter
    keys: it also holds personal heads and bottlenecks, which are not part of the evaluated LM)."""
    fed = ckpt.get("federation")
    if fed is not None:
        if not isinstance(fed, dict):
            raise CheckpointError(f"--run {str(path)!r}: 'federation' is a {type(fed).__name__}, expected a mapping")
        if "global_state" in fed:
            return "federation.global_state", fed["global_state"]
    return "state_dict", {k: v for k, v in ckpt["state_dict"].items() if "lora_" in k}


def _personal(module_args: dict[str, Any], key: str) -> bool:
    """Whether the run kept LoRA weight ``key`` on its clients (FedPer's upper layers): a global
    state does not hold it, and the evaluated model keeps it at its start (no change: B = 0)."""
    from lightning_fed.modules.fedper import FedPerModule, layer_index

    class_path = str(module_args.get("_class_path") or "")
    if class_path.rsplit(".", 1)[-1] != FedPerModule.__name__:
        return False
    index = layer_index(key)
    shared_layers = module_args.get("shared_layers", 2)
    return index is not None and isinstance(shared_layers, int) and index >= shared_layers
