"""FedPDPO step cost with the backbone forward shared by the personal and the LoRA step, vs recomputed
(issue 23).

Algorithm 1 alternates, on every batch, a step of the personal modules (LoRA frozen) and a step of
LoRA (personal modules frozen). LoRA does not change between the two, so the backbone's output
``z'`` is the same: ``model.reuse_backbone_forward: true`` (the default) runs the backbone once per
batch and keeps its graph for the LoRA step; ``false`` runs it again (the earlier behaviour). One
process, two modules built from the same seed, each trained by a Lightning Trainer on the same
random batches (``--pairs`` pairs of ``--length`` tokens each side, half scored) for one warm-up
epoch (it also fills the DPO reference cache) and ``--epochs`` timed epochs; the two alternate
epoch by epoch so that load on a shared machine hits both alike. Reported: the process CPU time
of a ``training_step`` (median over the timed steps; with one torch thread it does not count time
spent waiting for a core) and the wall time, and their ratios reuse / recompute. The last line is
``pdpo_forward_reuse: cpu_ratio=<reuse/recompute>``.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/pdpo_forward_reuse.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from dpo_reference_cache import random_batches  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=4, help="pairs per batch")
    parser.add_argument("--length", type=int, default=128, help="tokens per response sequence")
    parser.add_argument("--pairs", type=int, default=16, help="distinct pairs (one epoch)")
    parser.add_argument("--epochs", type=int, default=4, help="timed epochs per variant after the warm-up")
    parser.add_argument("--layers", type=int, default=6, help="GPT-2 blocks of the backbone built from a config")
    parser.add_argument("--width", type=int, default=256, help="its hidden width")
    parser.add_argument("--vocab", type=int, default=8192, help="its vocabulary (the personal head's output)")
    parser.add_argument("--model", default=None, help="backbone.name_or_path instead (e.g. a gguf: SmolLM2)")
    args = parser.parse_args()

    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader

    from lightning_fed.modules import BackboneConfig, LoraSettings, PDPOModule

    class TimedPDPO(PDPOModule):
        """Records the wall and process CPU time of every training step."""

        def training_step(self, batch, batch_idx):
            wall, cpu = time.perf_counter(), time.process_time()
            out = super().training_step(batch, batch_idx)
            self.timings.append((self.pass_index, time.perf_counter() - wall, time.process_time() - cpu))
            return out

    if args.model:
        backbone = BackboneConfig(name_or_path=args.model)
        label = args.model
    else:
        config = {"model_type": "gpt2", "n_layer": args.layers, "n_embd": args.width, "n_head": 4}
        backbone = BackboneConfig(config={**config, "n_positions": 2 * args.length, "vocab_size": args.vocab})
        label = f"GPT-2 {args.layers} x {args.width}, vocab {args.vocab}"
    modules = {}
    for reuse in (True, False):
        pl.seed_everything(0, verbose=False)
        modules[reuse] = TimedPDPO(
            backbone, lora=LoraSettings(r=8, alpha=16, dropout=0.0), lr=1e-4, reuse_backbone_forward=reuse
        )
        modules[reuse].timings = []
    vocab = modules[True].model.get_base_model().config.vocab_size
    batches = random_batches(vocab, args.pairs, args.batch, args.length)
    loader = DataLoader(batches, batch_size=None, shuffle=False)
    for epoch in range(args.epochs + 1):
        for reuse in (True, False) if epoch % 2 == 0 else (False, True):
            modules[reuse].pass_index = epoch  # pass 0 warms up (and fills the reference cache)
            trainer = pl.Trainer(
                max_epochs=1,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                num_sanity_val_steps=0,
                limit_val_batches=0,
            )
            trainer.fit(modules[reuse], train_dataloaders=loader)
    stats = {}
    for reuse, module in modules.items():
        timed = [(w, c) for e, w, c in module.timings if e >= 1]
        stats[reuse] = statistics.median(w for w, _ in timed), statistics.median(c for _, c in timed), len(timed)
    print(
        f"FedPDPO training step, {label}, batch {args.batch} pairs x {args.length} tokens, LoRA r=8, "
        f"torch threads {torch.get_num_threads()}; {stats[True][2]} timed steps each"
    )
    for name, reuse in (("backbone forward reused", True), ("backbone forward recomputed", False)):
        wall, cpu, _ = stats[reuse]
        print(f"  {name:<28} median {wall:.3f} s/step wall, {cpu:.3f} s/step process CPU")
    print(f"  wall ratio {stats[True][0] / stats[False][0]:.3f}")
    print(f"pdpo_forward_reuse: cpu_ratio={stats[True][1] / stats[False][1]:.3f}")


if __name__ == "__main__":
    main()
