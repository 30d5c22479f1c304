"""A finished tiny run on disk, laid out as ``lightning-fed fit`` writes it, for evaluation tests."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
import yaml

from tests.helpers.runs import tiny_dpo


def make_run(root: Path, seed: int = 3, data_args: dict | None = None):
    """``root/config.yaml``, ``root/adapter/`` and ``root/checkpoints/last.ckpt`` of a tiny DPO
    module whose LoRA B matrices are non-zero (so the adapter changes the model).

    ``data_args`` are the config's ``data.init_args`` (default: ``template: plain``).

    Returns:
        The module (its model is the one evaluation must rebuild).
    """
    module = tiny_dpo(seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.5)
    module.eval()
    root.mkdir(parents=True, exist_ok=True)
    backbone = asdict(module.hparams.backbone)
    lora = asdict(module.hparams.lora)
    config = {
        "seed_everything": seed,
        "model": {"class_path": "lightning_fed.modules.DPOModule", "init_args": {"backbone": backbone, "lora": lora}},
        "data": {
            "class_path": "lightning_fed.datamodules.PreferenceDataModule",
            "init_args": data_args or {"template": "plain"},
        },
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    module.save_adapter(root / "adapter")
    (root / "checkpoints").mkdir(exist_ok=True)
    shared = {k: v.detach().clone() for k, v in module.shared_parameters().items()}
    ckpt = {
        "hyper_parameters": {"backbone": backbone, "lora": lora},
        "federation": {"global_state": shared},
        "callbacks": {"FederatedLoop": {"seed": seed}},
        "state_dict": {},
    }
    torch.save(ckpt, root / "checkpoints" / "last.ckpt")
    return module
