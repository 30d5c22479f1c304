"""Tiny personalized-FL modules (FedPDPO and baselines) for tests."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from lightning_fed.modules import BackboneConfig, LoraSettings
from tests.helpers.runs import TINY_GPT2


def tiny_kwargs(lr: float = 5e-3, beta: float = 0.5) -> dict[str, Any]:
    return {
        "backbone": BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"),
        "lora": LoraSettings(r=4, alpha=8, dropout=0.0),
        "lr": lr,
        "beta": beta,
    }


def tiny(cls: type, seed: int = 0, **kwargs: Any):
    """``cls`` on the tiny GPT-2; PDPO defaults scaled to its 32-wide hidden state."""
    from lightning_fed.modules.pdpo import PDPOModule

    pl.seed_everything(seed, verbose=False)
    if issubclass(cls, PDPOModule):
        kwargs = {"bottleneck_dim": 16, "reward_hidden": 32, "bottleneck_dropout": 0.0, "reward_dropout": 0.0, **kwargs}
    return cls(**tiny_kwargs(), **kwargs)
