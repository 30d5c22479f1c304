"""Tiny offsite-tuning runs (FedBiOT, FedOT) for the tests."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.datamodules import InstructionDataModule
from lightning_fed.modules import BackboneConfig, OffsiteModule
from lightning_fed.round_hooks import EmulatorAlignment
from lightning_fed.strategies import FedAvg, FedProx
from tests.helpers.runs import fit

# 8 layers so that both layouts have a non-trivial emulator; a wide init makes every layer
# change the residual stream, so dropping layers is felt (a 0.02 init is near identity).
TINY_DEEP_GPT2 = {
    "model_type": "gpt2",
    "n_layer": 8,
    "n_embd": 32,
    "n_head": 2,
    "n_positions": 128,
    "initializer_range": 0.1,
}
CLIENT_FAMILIES = ["uppercase", "reverse_words"]
PUBLIC_FAMILIES = ["sort_words", "capitalize", "drop_first"]  # a different distribution, as in the paper


@pytest.fixture
def one_thread():
    """The CI machine is shared: one intra-op thread is several times faster under load."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def offsite_module(layout: str = "fedbiot", seed: int = 0, config: dict | None = None, **kwargs: Any) -> OffsiteModule:
    pl.seed_everything(seed, verbose=False)
    kwargs.setdefault("lr", 0.05)
    backbone = BackboneConfig(config={**TINY_DEEP_GPT2, **(config or {})}, tokenizer="bytes")
    return OffsiteModule(backbone, layout=layout, **kwargs)


def public_alignment(**kwargs: Any) -> EmulatorAlignment:
    args = {
        "num_clients": 1,
        "examples_per_client": 96,
        "families": PUBLIC_FAMILIES,
        "families_per_client": len(PUBLIC_FAMILIES),
    }
    kwargs.setdefault("lr", 0.01)
    kwargs.setdefault("batch_size", 8)
    return EmulatorAlignment(
        dataset="synthetic:instructions", synthetic_args=args, template="plain", max_length=96, **kwargs
    )


def client_data(per_client: int = 24, **kwargs: Any) -> InstructionDataModule:
    args = {"num_clients": 4, "examples_per_client": per_client, "families": CLIENT_FAMILIES, "families_per_client": 1}
    kwargs.setdefault("batch_size", 8)
    return InstructionDataModule(
        num_clients=4, synthetic_args=args, template="plain", max_length=128, val_fraction=0.25, **kwargs
    )


def run_method(
    method: str,
    root: str,
    rounds: int = 3,
    seed: int = 0,
    ckpt_path: str | None = None,
    module: OffsiteModule | None = None,
    **kwargs: Any,
) -> tuple[FederatedLoop, EmulatorAlignment, OffsiteModule]:
    """``fedbiot`` (last-4 adapter, per-round alignment, prox) or ``fedot`` (2+2 adapter, one distillation)."""
    fedbiot = method == "fedbiot"
    module = module or offsite_module("fedbiot" if fedbiot else "offsite", seed=seed, adapter_layers=4)
    steps_per_round = kwargs.pop("steps_per_round", 5)
    hook = public_alignment(
        distill_steps=kwargs.pop("distill_steps", 20), steps_per_round=steps_per_round if fedbiot else 0
    )
    strategy = FedProx(mu=kwargs.pop("epsilon", 0.01)) if fedbiot else FedAvg()
    loop = FederatedLoop(
        rounds=rounds,
        clients_per_round=2,
        local_steps=kwargs.pop("local_steps", 8),
        strategy=strategy,
        hooks=[hook],
        seed=seed,
    )
    fit(module, client_data(), loop, root, ckpt_path=ckpt_path, **kwargs)
    return loop, hook, module
