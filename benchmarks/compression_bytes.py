"""Compressed uploads: bytes per update and reconstruction error, per compressor.

The update is shaped like a rank-16 LoRA on ``q_proj`` and ``v_proj`` of SmolLM2-135M
(30 layers, hidden 576, 3 key-value heads of 64: ``A`` 16x576, ``B`` 576x16 and 192x16), with
synthetic values (Student-t with 3 degrees of freedom times 1e-3: heavy tails, like the
outliers that make per-block scales matter). No training: what this measures is the byte
count (exact) and how much of the update survives, for one round and, with error feedback,
for the sum over ``--rounds`` rounds (relative L2 error of ``sum_t D(C(.))`` against
``sum_t Delta_t``).

    .venv/bin/python benchmarks/compression_bytes.py --rounds 10
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def lora_update(g, scale: float = 1e-3) -> dict:
    shapes = {}
    for layer in range(30):
        for proj, out in (("q_proj", 576), ("v_proj", 192)):
            prefix = f"model.layers.{layer}.self_attn.{proj}"
            shapes[f"{prefix}.lora_A.default.weight"] = (16, 576)
            shapes[f"{prefix}.lora_B.default.weight"] = (out, 16)
    return {k: _t(g, s) * scale for k, s in shapes.items()}


def _t(g, shape):
    import torch

    # Student-t(3) from a seeded generator: z / sqrt(chi2_3 / 3)
    z = torch.randn(shape, generator=g)
    chi2 = torch.randn((3, *shape), generator=g).pow(2).sum(0)
    return z / (chi2 / 3).sqrt()


def main() -> None:
    import torch

    from lightning_fed.compression import BlockwiseQuantization, TopKSparsification
    from lightning_fed.state import state_nbytes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    variants = {
        "int8, block 64": BlockwiseQuantization(8, 64),
        "4-bit, block 64": BlockwiseQuantization(4, 64),
        "4-bit, block 64, EF": BlockwiseQuantization(4, 64, error_feedback=True),
        "top-1%, no EF": TopKSparsification(0.01, error_feedback=False),
        "top-1%, EF": TopKSparsification(0.01),
    }
    g = torch.Generator().manual_seed(args.seed)
    deltas = [lora_update(g) for _ in range(args.rounds)]
    fp32 = state_nbytes(deltas[0])

    def rel(a, b):
        num = sum(float((a[k] - b[k]).pow(2).sum()) for k in b)
        return (num / sum(float(v.pow(2).sum()) for v in b.values())) ** 0.5

    print(f"{len(deltas[0])} tensors, {sum(v.numel() for v in deltas[0].values())} values, float32 {fp32} bytes")
    print("| compressor | bytes / update | vs float32 | error, one round | error of the sum over rounds |")
    print("|---|---:|---:|---:|---:|")
    print(f"| float32 | {fp32} | 1.000 | 0 | 0 |")
    for name, comp in variants.items():
        state: dict = {}
        sent_sum = {k: torch.zeros_like(v) for k, v in deltas[0].items()}
        true_sum = {k: torch.zeros_like(v) for k, v in deltas[0].items()}
        first_err = None
        for delta in deltas:
            payload, nbytes, state = comp.compress(delta, state)
            back = comp.decompress(payload)
            first_err = rel(back, delta) if first_err is None else first_err
            for k in delta:
                sent_sum[k] += back[k]
                true_sum[k] += delta[k]
        print(f"| {name} | {nbytes} | {nbytes / fp32:.4f} | {first_err:.4f} | {rel(sent_sum, true_sum):.4f} |")


# ------------------------------------------------------------ --train: FedDPO with compressed uploads
TRAIN_SPECS = [None, "int8", "int8+ef", "int4", "int4+ef", "topk:0.01-noef", "topk:0.01"]


def train_main(seeds: int) -> None:
    """Final validation DPO loss / preference accuracy and upload bytes per round, per compressor."""
    import json
    import statistics

    from hetero_learning import run

    runs = {spec: [run(seed, 4, compression=spec) for seed in range(seeds)] for spec in TRAIN_SPECS}
    print(f"tiny FedDPO, planted preferences, LoRA r=4, 2 clients a round, {seeds} seeds: median [min-max]")
    print("| compressor | up bytes / round | vs float32 | val DPO loss | pref acc | reward margin |")
    print("|---|---:|---:|---:|---:|---:|")
    fp32 = runs[None][0]["up_bytes"][0]
    for spec, res in runs.items():
        cells = []
        for key in ("loss", "pref_acc", "margin"):
            values = [r[key] for r in res]
            cells.append(f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]")
        up = res[0]["up_bytes"][0]
        print(f"| {spec or 'float32'} | {up} | {up / fp32:.3f} | " + " | ".join(cells) + " |")
    print(
        json.dumps(
            {
                str(k): [{x: r[x] for x in ("loss", "pref_acc", "margin", "up_bytes")} for r in v]
                for k, v in runs.items()
            }
        )
    )


if __name__ == "__main__" and "--train" in sys.argv:
    train_main(int(sys.argv[sys.argv.index("--seeds") + 1]) if "--seeds" in sys.argv else 3)
elif __name__ == "__main__":
    main()
