"""Shared runner of the issue-26 learning benchmarks: a tiny FedDPO run on planted preferences.

Used by ``hetero_ranks.py --train`` and ``compression_bytes.py --train``: a 2-layer GPT-2 (byte
tokenizer, random init) trained by DPO on the synthetic ``positive`` preference set, 6 clients,
2 a round, every client evaluated after the last round. Returns the final validation loss and
preference accuracy overall and per client, and the bytes of every round.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def run(
    seed: int,
    r: int,
    strategy: Any = None,
    hooks: list | None = None,
    rounds: int = 3,
    local_steps: int = 3,
    keep_history: bool = False,
    **loop: Any,
) -> dict[str, Any]:
    import lightning.pytorch as pl
    import torch

    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.datamodules import PreferenceDataModule
    from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings

    torch.set_num_threads(1)
    pl.seed_everything(seed, verbose=False)
    module = DPOModule(
        BackboneConfig(
            config={"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 256},
            tokenizer="bytes",
        ),
        lora=LoraSettings(r=r, alpha=2 * r, dropout=0.0),
        lr=3e-3,
        beta=0.5,
    )
    args = {"num_clients": 6, "examples_per_client": 24, "groups": ["positive"], "seed": seed}
    data = PreferenceDataModule(num_clients=6, synthetic_args=args, batch_size=4, max_length=160, val_fraction=0.25)
    loop.setdefault("clients_per_round", 2)
    fed = FederatedLoop(
        rounds=rounds,
        local_steps=local_steps,
        seed=seed,
        strategy=strategy,
        hooks=hooks,
        eval_clients="all",
        save_adapter=False,
        **loop,
    )
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            default_root_dir=root,
            callbacks=[fed],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
        trainer.fit(module, datamodule=data)
        history = list(fed.server.report.history)  # read from the run folder: before it is removed
    last = history[-1]
    return {
        "loss": last["val"]["loss"],
        "pref_acc": last["val"]["pref_acc"],
        "margin": last["val"]["reward_margin"],
        "clients": {int(c): m for c, m in last["val_clients"].items()},
        "up_bytes": [h["up_bytes"] for h in history],
        "down_bytes": [h["down_bytes"] for h in history],
        "summary": fed.server.hook_summaries(),
        **({"history": history} if keep_history else {}),
    }
