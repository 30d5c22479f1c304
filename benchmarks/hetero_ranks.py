"""Heterogeneous LoRA ranks: how far each aggregator's global product is from the exact mean.

Tensor-level benchmark of the aggregation rules alone (no training): one 64x64 LoRA module,
12 clients in three rank tiers (4/8/16, four each), all starting from the rank-16 global
adapter truncated to their rank and drifting by ``--drift`` (relative, Gaussian), as after a
round of local steps. The exact aggregate is the weighted mean of the clients' products
``sum_k p_k B_k A_k``. Reported, median over seeds (min-max):

* ``global``: ``||B_g A_g - exact||_F / ||exact||_F`` of the global adapter each rule returns
  (FLoRA: the merged stack);
* ``tier r``: the same for what a rank-``r`` client starts the next round from;
* ``down``: float32 bytes a client downloads per module (FLoRA: the whole stack).

    .venv/bin/python benchmarks/hetero_ranks.py --seeds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

A, B = "m.lora_A.default.weight", "m.lora_B.default.weight"
TIERS = (4, 8, 16)


def one_seed(seed: int, drift: float, dim: int) -> dict[str, dict[str, float]]:
    import torch

    from lightning_fed.strategies import ClientUpdate, FlexLoRA, FLoRA, HetLoRA
    from lightning_fed.strategies.lora_factors import truncate_rank

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(seed)
    r_max = max(TIERS)
    glob = {A: torch.randn(r_max, dim, generator=g) / dim**0.5, B: torch.randn(dim, r_max, generator=g) / r_max**0.5}
    ranks = [r for r in TIERS for _ in range(4)]
    updates = []
    for k, r in enumerate(ranks):
        start = truncate_rank(glob, r)
        state = {key: v + drift * v.std() * torch.randn(v.shape, generator=g) for key, v in start.items()}
        updates.append(ClientUpdate(k, int(torch.randint(50, 150, (1,), generator=g)), state))
    total = sum(u.num_examples for u in updates)
    exact = sum(u.num_examples / total * (u.state[B] @ u.state[A]) for u in updates)

    def rel(p):
        return float(torch.linalg.matrix_norm(p - exact) / torch.linalg.matrix_norm(exact))

    out: dict[str, dict[str, float]] = {}
    for name, strategy in (
        ("HetLoRA", HetLoRA(ranks)),
        ("HetLoRA-sparsity", HetLoRA(ranks, "sparsity")),
        ("FlexLoRA", FlexLoRA(ranks)),
        ("FLoRA", FLoRA(ranks)),
    ):
        strategy.setup(glob, len(ranks))
        new = strategy.aggregate(glob, updates)
        row = {}
        if name == "FLoRA":  # every client merges the stack into its base and restarts at B = 0
            merged = strategy.base_delta["m"]
            row["global"] = rel(merged)
            row.update({f"tier {r}": rel(merged) for r in TIERS})
            stack = sum(r * 2 * dim * 4 for r in ranks)
            row.update({f"down {r}": float(stack) for r in TIERS})
        else:
            row["global"] = rel(new[B] @ new[A])
            for r in TIERS:
                c = strategy.client_model(ranks.index(r), new)
                row[f"tier {r}"] = rel(c[B] @ c[A])
                row[f"down {r}"] = float(r * 2 * dim * 4)
        out[name] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--drift", type=float, default=0.3)
    parser.add_argument("--dim", type=int, default=64)
    args = parser.parse_args()
    runs = [one_seed(s, args.drift, args.dim) for s in range(args.seeds)]
    cols = ["global"] + [f"tier {r}" for r in TIERS] + [f"down {r}" for r in TIERS]
    print(f"drift {args.drift}, dim {args.dim}, seeds {args.seeds}; relative error of the product (median [min-max])")
    print("| aggregator | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    summary = {}
    for name in runs[0]:
        cells = []
        for col in cols:
            values = [run[name][col] for run in runs]
            med = statistics.median(values)
            cells.append(
                f"{int(med)}" if col.startswith("down") else f"{med:.3f} [{min(values):.3f}-{max(values):.3f}]"
            )
            summary.setdefault(name, {})[col] = med
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(json.dumps({"drift": args.drift, "dim": args.dim, "seeds": args.seeds, "median": summary}))


if __name__ == "__main__" and "--train" not in sys.argv:
    main()


# ------------------------------------------------------------------ --train: learning per rank tier
TRAIN_RANKS = [4, 4, 8, 8, 16, 16]  # client k's rank: two clients per tier


def train_variants(seed: int) -> dict[str, dict]:
    """Final validation DPO loss / preference accuracy / reward margin, overall and per tier."""
    from hetero_learning import run

    from lightning_fed.heterogeneity import ClientRanks
    from lightning_fed.strategies import FedAvg, FlexLoRA, HetLoRA

    variants = {
        "FedAvg, all rank 4": lambda: run(seed, 4, FedAvg()),
        "FedAvg, all rank 16": lambda: run(seed, 16, FedAvg()),
        "HetLoRA 4/8/16": lambda: run(seed, 16, HetLoRA(), [ClientRanks(per_client=TRAIN_RANKS)]),
        "HetLoRA-sparsity 4/8/16": lambda: run(
            seed, 16, HetLoRA(weighting="sparsity"), [ClientRanks(per_client=TRAIN_RANKS)]
        ),
        "FlexLoRA 4/8/16": lambda: run(seed, 16, FlexLoRA(), [ClientRanks(per_client=TRAIN_RANKS)]),
    }
    out = {}
    for name, go in variants.items():
        res = go()
        row = {"loss": res["loss"], "pref_acc": res["pref_acc"], "margin": res["margin"], "up": sum(res["up_bytes"])}
        for tier in TIERS:
            members = [c for c, r in enumerate(TRAIN_RANKS) if r == tier]
            row[f"loss {tier}"] = statistics.mean(res["clients"][c]["loss"] for c in members)
        out[name] = row
    return out


def train_main(seeds: int) -> None:
    runs = [train_variants(s) for s in range(seeds)]
    cols = ["loss", "pref_acc", "margin"] + [f"loss {t}" for t in TIERS] + ["up"]
    print(f"tiny FedDPO, planted preferences, 6 clients (ranks {TRAIN_RANKS}), {seeds} seeds: median [min-max]")
    print("| variant | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for name in runs[0]:
        cells = []
        for col in cols:
            values = [run[name][col] for run in runs]
            med = statistics.median(values)
            cells.append(f"{int(med)}" if col == "up" else f"{med:.3f} [{min(values):.3f}-{max(values):.3f}]")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(json.dumps(runs))


if __name__ == "__main__" and "--train" in sys.argv:
    train_main(int(sys.argv[sys.argv.index("--seeds") + 1]) if "--seeds" in sys.argv else 3)
