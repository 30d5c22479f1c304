"""Build and run small federated fits in-process."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.datamodules import PreferenceDataModule
from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings

TINY_GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 256}


def tiny_llama(**overrides: Any) -> dict[str, Any]:
    """A tiny Llama config (rotary positions, grouped-query attention, RMSNorm, gated MLP: SmolLM2's
    architecture), with ``overrides`` on top (e.g. ``max_position_embeddings``)."""
    return {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        **overrides,
    }


def tiny_dpo(seed: int = 0, lr: float = 5e-3, beta: float = 0.5, r: int = 4) -> DPOModule:
    pl.seed_everything(seed, verbose=False)
    return DPOModule(
        BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"),
        lora=LoraSettings(r=r, alpha=2 * r, dropout=0.0),
        lr=lr,
        beta=beta,
    )


def preference_data(
    num_clients: int = 4, per_client: int = 24, groups=("positive",), **kwargs: Any
) -> PreferenceDataModule:
    args = {"num_clients": num_clients, "examples_per_client": per_client, "groups": list(groups)}
    kwargs.setdefault("batch_size", 4)
    kwargs.setdefault("max_length", 160)
    kwargs.setdefault("val_fraction", 0.25)
    return PreferenceDataModule(num_clients=num_clients, synthetic_args=args, **kwargs)


def fit(
    module, data, loop: FederatedLoop, root: str, ckpt_path: str | None = None, **trainer_kwargs: Any
) -> pl.Trainer:
    from lightning.pytorch.callbacks import ModelCheckpoint

    trainer_kwargs.setdefault("enable_progress_bar", False)
    trainer_kwargs.setdefault("logger", False)
    trainer_kwargs.setdefault("num_sanity_val_steps", 0)
    callbacks = [loop, ModelCheckpoint(dirpath=f"{root}/ckpt", save_last=True, save_on_train_epoch_end=True)]
    trainer = pl.Trainer(default_root_dir=root, callbacks=callbacks, enable_model_summary=False, **trainer_kwargs)
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return trainer
