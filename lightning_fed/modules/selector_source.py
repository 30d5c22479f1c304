"""Where a trained binary selector comes from: a saved run, or a run of its own config.

FedBis / FedBiscuit (Wu et al., 2024, arXiv:2407.03038) train the selector(s) federatedly and
then use them on the server, to label RLFT pairs (Sec. 4) and to judge win rates (Table 1).
:class:`SelectorSource` names the selector either by path, so the two stages run as two CLI
calls, or by the config that trains it, so one config runs both stages:

* a PEFT folder written by a selector run (``<run dir>/adapter``): PEFT's ``default`` adapter
  at the top and FedBiscuit's ``selector_1 .. selector_{U-1}`` in sub-folders;
* a Lightning checkpoint (``.ckpt``) of a selector run: the federation's global state when the
  checkpoint has one, else the module's trainable state. It is read with ``weights_only=True``
  (tensors, containers, numbers, the allow-listed config classes): a crafted file is refused
  and nothing in it runs;
* ``train_config``: ``lightning-fed fit --config <train_config> <train_args...>`` runs first
  and its final global selector is used. That run is stage 1 of the FedBis pipeline
  (:func:`lightning_fed.pipelines.fedbis.train_selector`); this module only loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import yaml

from lightning_fed.datamodules.rlft import SelectorSource
from lightning_fed.federation.checkpoint_io import read_checkpoint
from lightning_fed.modules.adapter_files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    check_adapter_folder,
    check_shapes,
    read_adapter_weights,
)
from lightning_fed.modules.backbone import BackboneConfig
from lightning_fed.modules.lora import LoraSettings
from lightning_fed.modules.selector import BinarySelectorModule, selector_name

__all__ = ["SelectorSource", "load_selector"]


def load_selector(source: SelectorSource | str, backbone: BackboneConfig | None = None) -> BinarySelectorModule:
    """The trained selector(s) of ``source``, in eval mode.

    Args:
        source: A :class:`SelectorSource`, or just a path.
        backbone: Overrides ``source.backbone``.

    Raises:
        FileNotFoundError: If the path does not exist.
        ValueError: If the folder is not a selector adapter, the backbone cannot be found, or
            ``source`` names a ``train_config`` only.
    """
    if isinstance(source, str):
        source = SelectorSource(path=source)
    if backbone is None and isinstance(source.backbone, BackboneConfig):
        backbone = source.backbone
    elif backbone is None and source.backbone is not None:
        try:
            backbone = BackboneConfig(**source.backbone)
        except TypeError as err:  # an unknown key
            raise ValueError(f"selector.backbone: {err}") from None
    if source.path is None:
        raise ValueError(
            f"selector.train_config {source.train_config!r} names a run, not a saved selector: "
            "lightning_fed.pipelines.fedbis.train_selector runs it (the CLI does); load_selector needs selector.path"
        )
    path = Path(source.path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"selector.path {source.path!r}: no such file or folder")
    load = _from_checkpoint if path.is_file() else _from_adapter_folder
    selector = load(path, backbone, source.seed)
    selector.eval()
    return selector


def _build(backbone: BackboneConfig | dict, seed: int | None, **kwargs: Any) -> BinarySelectorModule:
    """The selector module; a backbone built from a config gets the training run's random weights.

    The CLI seeds the run and then builds the model first, so seeding just before building
    reproduces the backbone. The global RNG is left as it was.
    """
    backbone = BackboneConfig(**backbone) if isinstance(backbone, dict) else backbone
    if backbone.config is None:
        return BinarySelectorModule(backbone, **kwargs)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0 if seed is None else seed)
        return BinarySelectorModule(backbone, **kwargs)


def _from_checkpoint(path: Path, backbone: BackboneConfig | None, seed: int | None) -> BinarySelectorModule:
    ckpt = read_checkpoint(path, "selector.path")
    hp = ckpt.get("hyper_parameters") or {}
    if backbone is None and hp.get("backbone") is None:
        raise ValueError(
            f"selector.path {str(path)!r}: the checkpoint has no backbone hyper-parameter; set selector.backbone"
        )
    if seed is None:  # the FederatedLoop's callback state records the run's seed
        seed = next(
            (s["seed"] for s in (ckpt.get("callbacks") or {}).values() if isinstance(s, dict) and "seed" in s), None
        )
    selector = _build(
        backbone or hp["backbone"], seed, lora=hp.get("lora"), num_selectors=int(hp.get("num_selectors", 1))
    )
    state = (ckpt.get("federation") or {}).get("global_state") or ckpt.get("state_dict") or {}
    _load(selector, state, path)
    return selector


def _from_adapter_folder(path: Path, backbone: BackboneConfig | None, seed: int | None) -> BinarySelectorModule:
    if not (path / ADAPTER_CONFIG).is_file():
        raise ValueError(f"selector.path {str(path)!r}: not a PEFT adapter folder (no {ADAPTER_CONFIG})")
    num_selectors = 1
    while (path / selector_name(num_selectors) / ADAPTER_CONFIG).is_file():
        num_selectors += 1
    peft_cfg = check_adapter_folder(path, "selector.path")  # r, weights complete, finite, of rank r
    for u in range(1, num_selectors):
        check_adapter_folder(path / selector_name(u), "selector.path")
    targets = peft_cfg.get("target_modules")
    try:
        lora = LoraSettings(
            r=peft_cfg["r"],
            alpha=float(peft_cfg.get("lora_alpha", 8)),
            dropout=float(peft_cfg.get("lora_dropout", 0.0)),
            target_modules=sorted(targets) if targets else None,
        )
    except (TypeError, ValueError) as err:
        raise ValueError(f"selector.path {str(path / ADAPTER_CONFIG)!r}: {err}") from None
    run_backbone, run_seed = _run_config(path, need_backbone=backbone is None)
    selector = _build(
        backbone or run_backbone, run_seed if seed is None else seed, lora=lora, num_selectors=num_selectors
    )
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    for u in range(num_selectors):
        folder = path if u == 0 else path / selector_name(u)
        name = "default" if u == 0 else selector_name(u)
        weights = read_adapter_weights(folder / ADAPTER_WEIGHTS, "selector.path")
        expected = get_peft_model_state_dict(selector.model, adapter_name=name)
        check_shapes(weights, expected, "selector.path", folder / ADAPTER_WEIGHTS)
        result = set_peft_model_state_dict(selector.model, weights, adapter_name=name)
        unexpected = list(getattr(result, "unexpected_keys", []) or [])
        if unexpected:
            raise ValueError(f"selector.path {str(folder)!r}: weights do not fit the backbone, e.g. {unexpected[0]!r}")
    return selector


def _run_config(adapter: Path, need_backbone: bool) -> tuple[BackboneConfig | None, int | None]:
    """Backbone and seed of the run that wrote ``adapter``, from the ``config.yaml`` the CLI saved beside it."""
    config = adapter.parent / "config.yaml"
    if not config.is_file():
        if need_backbone:
            raise ValueError(
                f"selector.path {str(adapter)!r}: no config.yaml beside it to read the backbone from;"
                " set selector.backbone"
            )
        return None, None
    run = yaml.safe_load(config.read_text()) or {}
    model = run.get("model") or {}
    backbone = (model.get("init_args") or model).get("backbone")
    if need_backbone and not backbone:
        raise ValueError(f"selector: {str(config)!r} has no model.init_args.backbone; set selector.backbone")
    seed = run.get("seed_everything")
    return (BackboneConfig(**backbone) if backbone else None), (
        int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else None
    )


def _load(selector: BinarySelectorModule, state: dict[str, Any], path: Path) -> None:
    params = dict(selector.named_parameters())
    adapter_state = {k: v for k, v in state.items() if "lora_" in k}
    unknown = [k for k in adapter_state if k not in params]
    if not adapter_state or unknown:
        detail = f"e.g. {unknown[0]!r}" if unknown else "none found"
        raise ValueError(f"selector.path {str(path)!r}: adapter weights do not fit the selector ({detail})")
    check_shapes(adapter_state, params, "selector.path", path, required=[k for k in params if "lora_" in k])
    selector.load_state(adapter_state)
