"""Which config changes give a checkpoint's weights another meaning (lightning_fed/config_changes.py):
``validate``/``test`` hold a checkpoint to its module class, backbone, LoRA layout and the class's own
layout options (:data:`MODEL_LAYOUT`), never to a loss or training hyper-parameter (red team 11 row 9)."""

from __future__ import annotations

import inspect

import pytest

from lightning_fed.config_changes import MODEL_LAYOUT, weight_changes


def _run(model: str) -> dict:
    return {"model": {"class_path": f"lightning_fed.modules.{model}", "init_args": {}}}


CASES = {
    # (module class, changed key, decides the weights)
    "dpo_beta": ("DPOModule", "model.beta", False),
    "dpo_lr": ("DPOModule", "model.lr", False),
    "lora_dropout": ("DPOModule", "model.lora.dropout", False),
    "lora_rank": ("DPOModule", "model.lora.r", True),
    "lora_alpha": ("DPOModule", "model.lora.alpha", True),
    "lora_targets": ("DPOModule", "model.lora.target_modules", True),
    "backbone": ("SFTModule", "model.backbone.name_or_path", True),
    "module_class": ("DPOModule", "model", True),
    "offsite_beta": ("OffsiteModule", "model.beta", True),  # the emulator's layer-drop ratio
    "pdpo_bottleneck_dim": ("PDPOModule", "model.bottleneck_dim", True),
    "pdpo_bottleneck_dropout": ("PDPOModule", "model.bottleneck_dropout", False),
    "fedper_shared_layers": ("FedPerModule", "model.shared_layers", True),
    "selectors": ("BinarySelectorModule", "model.num_selectors", True),
    "users_class_beta": ("MyModule", "model.beta", True),  # a class not listed: every model key
}


@pytest.mark.parametrize("case", list(CASES))
def test_weight_changes_keeps_the_layout_and_drops_hyper_parameters(case):
    model, key, decides = CASES[case]
    change = f"{key}: 1 -> 2"
    assert weight_changes([change, "data.num_clients: 4 -> 5"], _run(model)) == ([change] if decides else [])


NOT_WEIGHTS = {
    *("lr", "weight_decay", "optimizer", "beta", "loss", "loss_options", "disable_dropout", "cache_reference"),
    *("reference_cache_bytes", "reference_cache_dir", "gamma", "odds_ratio_weight", "generation_metric"),
    *("max_new_tokens", "bottleneck_dropout", "gradient_clip_val", "head_steps", "lr_head", "lr_body"),
    *("inner_lr", "inner_steps", "eval_adapt_steps", "lr_h", "lr_w", "reward_dropout", "reward_weight_start"),
    *("reward_weight_end", "scale_momentum", "scale_eps", "rounds", "lr_decay", "min_lr", "local_schedule"),
    *("personal_epochs", "lora_epochs", "accumulate_grad_batches", "exclusion_k", "exclusion_max_ratio"),
    "reuse_backbone_forward",
}
"""Every parameter of the package's module classes that no weight depends on (as classified when
:data:`MODEL_LAYOUT` was written): a new parameter fails the walk below until it is classified."""


def _parameters(cls: type) -> list[str]:
    """``cls.__init__``'s named parameters, with those its ``**kwargs`` hand on to the classes above it."""
    out: list[str] = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or not klass.__module__.startswith("lightning_fed"):
            continue
        parameters = inspect.signature(vars(klass)["__init__"]).parameters.values()
        out += [p.name for p in parameters if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    return out


def test_every_module_parameter_is_classified():
    import lightning.pytorch as pl

    import lightning_fed.modules as modules

    classes = {
        name: cls
        for name in modules.__all__
        if isinstance(cls := getattr(modules, name), type) and issubclass(cls, pl.LightningModule)
    }
    assert sorted(classes) == sorted(MODEL_LAYOUT)
    for name, cls in classes.items():
        parameters = _parameters(cls)
        assert set(MODEL_LAYOUT[name]) <= set(parameters), name
        unclassified = set(parameters) - set(MODEL_LAYOUT[name]) - {"backbone", "lora"} - NOT_WEIGHTS
        assert not unclassified, f"{name}: classify {sorted(unclassified)} in config_changes.MODEL_LAYOUT"
