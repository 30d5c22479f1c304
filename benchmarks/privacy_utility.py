"""Utility against epsilon under client-level DP on a planted set with 1,000+ clients (issue 24).

FedDPO of a tiny GPT-2 built from a config (2 layers, width 32, byte tokenizer, LoRA r=4, as
``configs/tiny.yaml``) on ``synthetic:preferences`` (every client prefers the positive
sentiment; ``--dataset hard_preferences``: every pair also differs, on a random side, in the
sign-off the clients do not care about, with probability ``--distractor``; ``--examples`` pairs
per client, a quarter held out), ``--clients`` clients,
``--per-round`` of them per round (``--sampling fixed_size``, the default) or each client with
probability ``--per-round / --clients`` (``--sampling poisson``), K = ``--local-steps``.

* ``eps = inf``: plain FedAvg (no clipping, no noise), the non-private baseline;
* ``eps = 8, 2``: ``ClientLevelDP(FedAvg)`` (McMahan et al. 2018: clip each client's update to
  ``--clip-norm``, add ``N(0, z^2 C^2)`` to the sum, divide by ``m = --per-round``), with ``z``
  calibrated before training by ``PrivacyConfig(target_epsilon=eps).plan`` (Opacus RDP) for the
  planned rounds at ``delta = 1 / N^1.1``. Fixed-size sampling is accounted without
  amplification (sample rate 1, see ``lightning_fed.privacy.accountant``): a sound but loose
  bound. Poisson sampling is accounted at its rate ``q`` (amplification by subsampling), so the
  same epsilon needs a much smaller ``z``; ``m = q N`` is then the expected number of clients;
* ``--clip-only``: also ``ClientLevelDP(FedAvg)`` with ``z = 1e-6`` (every update clipped to ``C``,
  no measurable noise; no useful guarantee: ``federation.privacy`` takes only ``z > 0``), which
  separates what clipping costs from what the noise costs.

The metric is preference accuracy (``log p(y_w|x) > log p(y_l|x)``) after the last round on the
held-out pairs of a fixed panel of ``--panel`` clients (the same panel for every run), and
before round 1 for the baseline. Writes one JSON line per run, a Markdown table (mean +- sd over
seeds) and a PNG plot.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/privacy_utility.py --seeds 0 1 2
    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/privacy_utility.py --dataset hard_preferences \\
        --out runs/privacy_utility_hard [--sampling poisson] [--clip-only]
"""

from __future__ import annotations

import argparse
import json
import math
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

import dp_settings  # noqa: E402  (a sibling file)
from dp_settings import fmt  # noqa: E402

CLIP_ONLY_Z = 1e-6
TINY = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 256}


def run(eps: float, seed: int, args: argparse.Namespace, clip_only: bool = False) -> dict:
    import lightning.pytorch as pl

    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.datamodules import PreferenceDataModule
    from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings
    from lightning_fed.privacy import ClientLevelDP, PrivacyConfig
    from lightning_fed.strategies import FedAvg

    n, m = args.clients, args.per_round
    pl.seed_everything(seed, verbose=False)
    module = DPOModule(
        BackboneConfig(config=dict(TINY), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        lr=args.lr,
        beta=0.5,
    )
    synthetic = {"num_clients": n, "examples_per_client": args.examples, "groups": ["positive"]}
    if args.dataset == "hard_preferences":
        synthetic["distractor"] = args.distractor
    data = PreferenceDataModule(
        dataset=f"synthetic:{args.dataset}",
        num_clients=n,
        synthetic_args=synthetic,
        batch_size=4,
        max_length=160,
        val_fraction=0.25,
        seed=0,  # the same data and held-out pairs for every seed and epsilon
    )
    delta = 1.0 / n**1.1
    z, acc_eps, strategy = 0.0, math.inf, FedAvg()
    sampler = {"sampling": args.sampling, "clients_per_round": m}
    if args.sampling == "poisson":
        sampler = {"sampling": "poisson", "sampling_rate": m / n}
    # A private run withholds every validation figure unless asked for: the mean is this benchmark's metric.
    privacy = None
    if clip_only:
        # federation.privacy takes z > 0 only: 1e-6 puts noise of sd 1e-6 C / m on the mean, nothing measurable
        z = CLIP_ONLY_Z
        strategy = ClientLevelDP(FedAvg(), clip_norm=args.clip_norm, seed=seed)
        privacy = PrivacyConfig(noise_multiplier=z, delta=delta, report_validation=True)
    elif not math.isinf(eps):
        privacy = PrivacyConfig(target_epsilon=eps, delta=delta, report_validation=True)
        acc = privacy.plan(n, args.rounds, **sampler)  # what the run calibrates before training (checked below)
        z, acc_eps = acc.noise_multiplier, acc.epsilon(args.rounds)
        strategy = ClientLevelDP(FedAvg(), clip_norm=args.clip_norm, seed=seed)
    loop = FederatedLoop(
        privacy=privacy,
        rounds=args.rounds,
        **sampler,
        local_steps=args.local_steps,
        strategy=strategy,
        seed=seed,
        save_adapter=False,
        eval_clients="panel",
        eval_panel_size=args.panel,
        eval_every=args.rounds,
    )
    t0, c0 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = pl.Trainer(
            default_root_dir=tmp,
            callbacks=[loop],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=-1 if math.isinf(eps) else 0,
        )
        trainer.fit(module, datamodule=data)
    if privacy is not None:
        assert strategy.noise_multiplier == z, (strategy.noise_multiplier, z)
    initial = loop.server.report.initial_eval
    return {
        "target_epsilon": eps,
        "setting": dp_settings.name(eps, clip_only),
        "sampling": args.sampling,
        "seed": seed,
        "accountant_epsilon": acc_eps,
        "delta": delta,
        "noise_multiplier": z,
        "noise_std_on_mean": z * args.clip_norm / m,
        "unclipped_last_round": strategy.last_round.get("unclipped") if z or clip_only else None,
        "initial_pref_acc": None if not initial else initial["val"]["pref_acc"],
        "final_pref_acc": loop.server.report.history[-1]["val"]["pref_acc"],
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "args": {k: v for k, v in vars(args).items() if k not in ("epsilons", "seeds", "out", "table_only")},
    }


def table(records: list[dict]) -> str:
    lines = [
        "| setting | sampling | accountant epsilon | delta | z | noise sd on the mean | seeds | pref. accuracy after, "
        "mean ± sd | per seed | CPU s per run |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for label in sorted({dp_settings.label(r, "setting") for r in records}, key=dp_settings.order):
        rs = sorted((r for r in records if dp_settings.label(r, "setting") == label), key=lambda r: r["seed"])
        after = [r["final_pref_acc"] for r in rs]
        lines.append(
            f"| {label} | {rs[0].get('sampling', 'fixed_size')} | {rs[0]['accountant_epsilon']:.3f} | "
            f"{rs[0]['delta']:.2e} | {rs[0]['noise_multiplier']:.3f} | "
            f"{rs[0]['noise_std_on_mean']:.4f} | {len(rs)} | {fmt(after)} | {' / '.join(f'{a:.3f}' for a in after)} | "
            f"{statistics.mean(r['cpu_seconds'] for r in rs):.0f} |"
        )
    before = [r["initial_pref_acc"] for r in records if r["initial_pref_acc"] is not None]
    if before:
        lines.append(f"\nBefore round 1 (base model of each seed, same panel): {fmt(before)}")
    return "\n".join(lines)


def plot(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = sorted({dp_settings.label(r, "setting") for r in records}, key=dp_settings.order)
    labels = [dp_settings.axis_label(s) for s in settings]
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    for x, label in enumerate(settings):
        vals = [r["final_pref_acc"] for r in records if dp_settings.label(r, "setting") == label]
        ax.scatter([x] * len(vals), vals, color="tab:blue", alpha=0.5, s=18)
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        ax.errorbar([x], [statistics.mean(vals)], yerr=[sd], fmt="o", color="black", capsize=4)
    before = [r["initial_pref_acc"] for r in records if r["initial_pref_acc"] is not None]
    if before:
        ax.axhline(statistics.mean(before), color="gray", linestyle="--", label="before round 1")
        ax.legend(loc="lower left", fontsize=8)
    ax.set_xticks(range(len(settings)), labels)
    ax.set_xlabel(f"client-level epsilon (delta = 1/N^1.1), {records[0].get('sampling', 'fixed_size')} sampling")
    ax.set_ylabel("held-out preference accuracy")
    n = records[0]["args"]["clients"]
    ax.set_title(
        f"FedDPO, {n} clients, synthetic:{records[0]['args'].get('dataset', 'preferences')}, client-level DP",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epsilons", type=float, nargs="*", default=[math.inf, 8.0, 2.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--dataset", choices=["preferences", "hard_preferences"], default="preferences")
    parser.add_argument(
        "--distractor", type=float, default=1.0, help="hard_preferences: probability that the sign-off differs too"
    )
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--per-round", type=int, default=50, help="clients per round (poisson: expected)")
    parser.add_argument("--sampling", choices=["fixed_size", "poisson"], default="fixed_size")
    parser.add_argument("--clip-only", action="store_true", help="also run ClientLevelDP with z = 0 per seed")
    parser.add_argument("--examples", type=int, default=8, help="pairs per client (a quarter held out)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--local-steps", type=int, default=2)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--clip-norm", type=float, default=0.3)
    parser.add_argument("--panel", type=int, default=200, help="clients whose held-out pairs are scored")
    parser.add_argument("--out", default="runs/privacy_utility")
    parser.add_argument("--table-only", action="store_true", help="redo the table and plot from results.jsonl")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    if not args.table_only:
        runs = [(eps, False) for eps in args.epsilons] + ([(math.inf, True)] if args.clip_only else [])
        for seed in args.seeds:
            for eps, clip_only in runs:
                r = run(eps, seed, args, clip_only)
                with open(results, "a") as fh:
                    fh.write(json.dumps(r) + "\n")
                print(
                    f"{r['setting']} seed {seed}: accountant eps {r['accountant_epsilon']:.3f} "
                    f"z {r['noise_multiplier']:.3f} "
                    f"pref_acc {r['initial_pref_acc']} -> {r['final_pref_acc']:.3f} ({r['cpu_seconds']:.0f} CPU s)",
                    flush=True,
                )
    records = [json.loads(line) for line in results.read_text().splitlines()]
    print(table(records))
    plot(records, out / "utility_vs_epsilon.png")


if __name__ == "__main__":
    main()
