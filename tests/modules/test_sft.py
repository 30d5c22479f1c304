"""SFTModule (FedIT): it learns planted instruction families through the federated loop."""

import lightning.pytorch as pl

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.datamodules import InstructionDataModule
from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule
from tests.helpers.runs import TINY_GPT2, fit


def test_fedit_learns_planted_transformations(tmp_path):
    pl.seed_everything(0, verbose=False)
    # A random tiny model's logits are near uniform (small init, tied head): a wider init lets
    # LoRA alone move them within seconds.
    config = {**TINY_GPT2, "n_embd": 64, "initializer_range": 0.1}
    module = SFTModule(
        BackboneConfig(config=config, tokenizer="bytes"), lora=LoraSettings(r=8, alpha=16, dropout=0.0), lr=5e-3
    )
    data = InstructionDataModule(
        num_clients=4,
        synthetic_args={
            "num_clients": 4,
            "examples_per_client": 32,
            "families": ["uppercase", "reverse_words"],
            "families_per_client": 1,
        },
        template="plain",
        batch_size=8,
        max_length=128,
        val_fraction=0.25,
    )
    loop = FederatedLoop(rounds=5, clients_per_round=2, local_steps=20, seed=0)
    fit(module, data, loop, str(tmp_path), num_sanity_val_steps=-1)
    before, after = loop.server.report.initial_eval["val"], loop.server.report.history[-1]["val"]
    # Measured: loss 5.71 -> 4.39, token accuracy 0.01 -> 0.20 on held-out rows.
    assert after["loss"] < 0.85 * before["loss"], (before, after)
    assert after["token_acc"] > before["token_acc"] + 0.1, (before, after)
