"""Utility against epsilon on real text (issue 24): FedDPO of SmolLM2-135M-Instruct on the
movie-review polarity pairs of ``build_data.py``, with example-level DP-SGD inside each client.

The polarity set has 4 clients (users), so client-level DP would put noise ``z C / 4`` on every
coordinate of the mean update: no utility at any useful epsilon. Example-level DP-SGD
(Abadi et al. 2016; ``lightning_fed.privacy.DPDPOModule``: the example is the preference *pair*,
its gradient on the LoRA parameters clipped to ``--clip-norm``, Gaussian noise ``N(0, z^2 C^2)``
on each batch's sum) is the guarantee that fits: it protects each pair of a client's data from
everyone who sees that client's updates (server, other clients, the released model).

Every run is ``configs/real_text_feddpo.yaml`` (setting ``iid``: 4 users, 16 training pairs
each, 2 rounds x 3 local steps of batch 4, AdamW lr 1e-3, LoRA r=8, beta 0.1) through
``run.py``'s ``run_job`` (``lightning-fed fit`` in a subprocess, ``OMP_NUM_THREADS=1``,
``nice -n 5``), with

* ``eps = inf``: the config as it is (``DPOModule``: no clipping, no noise), the baseline;
* ``--clip-only``: ``DPDPOModule`` with ``z = 1e-6`` (per-example clipping to ``C``, noise of sd
  1e-6 C, nothing measurable; ``dp_sgd`` takes only ``z > 0``): what the clipping alone costs;
* ``eps = 8, 2``: ``--model.class_path=lightning_fed.privacy.DPDPOModule`` and
  ``dp_sgd: {clip_norm: C, noise_multiplier: z}``, ``z`` calibrated here before training by
  ``PrivacyAccountant.calibrated`` (Opacus RDP) for ``rounds x local_steps`` steps at sample
  rate ``B / |D_k| = 4 / 16`` and ``--delta`` (1e-5; the Poisson-batch accounting of
  ``example_level_accountant``, the usual approximation for shuffled fixed-size batches). The
  record also holds the epsilon without amplification (rate 1, ``ceil(K B / |D_k|)`` uses of an
  example per round), sound for shuffled batches. The DP runs set
  ``federation.privacy.report_validation: true`` (a private run writes no figure computed on the
  clients' validation data otherwise: the example-weighted mean is what this benchmark measures)
  and ``federation.privacy.delta`` to ``--delta``, so that ``summary.json``'s own epsilon is this one.

Metric: preference accuracy (``log p(y_w|x) > log p(y_l|x)``, summed) and the DPO reward margin
on the 32 held-out TEST pairs after the last round (the real-text table's metric), before round
1 for the seeds in ``--initial-seeds``. One JSON line per run (written as each run ends), a
Markdown table (mean +- sd over seeds) and a plot:

    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 .venv/bin/python benchmarks/real_text/privacy_epsilon.py \\
        --epsilons inf 8 2 --seeds 0 1 2 --initial-seeds 0
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # benchmarks/: dp_settings
sys.path.insert(0, str(HERE.parents[1]))

import dp_settings  # noqa: E402
from dp_settings import fmt  # noqa: E402
from run import DATA, ROOT, run_job  # noqa: E402  (a sibling file)

SETTING = "iid"
PAIRS_PER_CLIENT = 16  # build_data.py's iid training pairs per user
CONFIG = {"rounds": 2, "local_steps": 3, "batch_size": 4}  # configs/real_text_feddpo.yaml


def plan(eps: float, args: argparse.Namespace) -> dict:
    """``z`` for ``eps`` and the two epsilons of that ``z`` (amplified, and without amplification)."""
    from lightning_fed.privacy import PrivacyAccountant

    if math.isinf(eps):
        return {"z": 0.0, "accountant_epsilon": math.inf, "epsilon_no_amplification": math.inf}
    steps = CONFIG["rounds"] * CONFIG["local_steps"]
    rate = CONFIG["batch_size"] / PAIRS_PER_CLIENT
    acc = PrivacyAccountant.calibrated(eps, args.delta, rate, steps)
    uses = CONFIG["rounds"] * math.ceil(CONFIG["local_steps"] * CONFIG["batch_size"] / PAIRS_PER_CLIENT)
    return {
        "z": acc.noise_multiplier,
        "accountant_epsilon": acc.epsilon(steps),
        "sample_rate": rate,
        "steps": steps,
        "epsilon_no_amplification": PrivacyAccountant(acc.noise_multiplier, 1.0, args.delta).epsilon(uses),
        "uses_per_example": uses,
    }


#: ``--clip-only``: DP-SGD's per-example clipping with noise of sd 1e-6 C (``dp_sgd`` takes z > 0 only):
#: what the clipping alone costs, without a useful guarantee.
CLIP_ONLY_Z = 1e-6


def tag(eps: float, clip_only: bool = False) -> str:
    return "_dp_cliponly" if clip_only else "_dp_inf" if math.isinf(eps) else f"_dp_eps{eps:g}"


def setting(record: dict) -> str:
    """The record's DP setting, under ``dp`` (``setting`` is ``run.py``'s data setting, ``iid``)."""
    return dp_settings.label(record, "dp")


def run(eps: float, seed: int, initial: bool, args: argparse.Namespace, log_dir: Path, clip_only: bool = False) -> dict:
    p = plan(eps, args)
    if clip_only:
        p = {"z": CLIP_ONLY_Z, "accountant_epsilon": math.inf, "epsilon_no_amplification": math.inf}
    extra = []
    if clip_only or not math.isinf(eps):
        extra = [
            "--model.class_path=lightning_fed.privacy.DPDPOModule",
            f"--model.init_args.dp_sgd.clip_norm={args.clip_norm}",
            f"--model.init_args.dp_sgd.noise_multiplier={p['z']}",
            f"--model.init_args.dp_sgd.seed={10_000 + seed}",  # reproducible benchmark noise, not a deployment
            # the measurement is the validation mean, which a private run withholds unless asked for; and
            # the summary's own epsilon at this benchmark's delta (the run's default is min(1/N^1.1, 1e-5))
            "--federation.privacy.report_validation=true",
            f"--federation.privacy.delta={args.delta}",
        ]
    r = run_job(SETTING, "feddpo", seed, initial, extra, tag(eps, clip_only), log_dir, args.reuse)
    summary = json.loads(
        (ROOT / "runs/real_text" / f"{SETTING}_feddpo{tag(eps, clip_only)}" / f"s{seed}" / "summary.json").read_text()
    )
    margin = lambda ev: None if not ev else ev["val"].get("reward_margin")  # noqa: E731
    return {
        **r,
        "target_epsilon": eps,
        "dp": dp_settings.name(eps, clip_only),
        **p,
        "delta": args.delta,
        "clip_norm": args.clip_norm if clip_only or not math.isinf(eps) else None,
        "initial_reward_margin": margin(summary.get("initial")),
        "final_reward_margin": margin(summary.get("final")),
        "summary_privacy": summary.get("privacy"),
    }


def table(records: list[dict]) -> str:
    lines = [
        "| setting | accountant epsilon (amplified) | without amplification | delta | z | seeds "
        "| pref. accuracy after, mean ± sd | per seed | reward margin after | minutes per run |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for label in sorted({setting(r) for r in records}, key=dp_settings.order):
        rs = sorted((r for r in records if setting(r) == label), key=lambda r: r["seed"])
        after = [r["final"]["all"] for r in rs]
        margins = [r["final_reward_margin"] for r in rs if r["final_reward_margin"] is not None]
        lines.append(
            f"| {label} | {rs[0]['accountant_epsilon']:.3f} | {rs[0]['epsilon_no_amplification']:.3f} | "
            f"{rs[0]['delta']:.0e} | {rs[0]['z']:.3f} | {len(rs)} | {fmt(after)} | "
            f"{' / '.join(f'{a:.3f}' for a in after)} | {fmt(margins) if margins else '-'} | "
            f"{statistics.mean(r['seconds'] for r in rs) / 60:.1f} |"
        )
    before = [r["initial"]["all"] for r in records if r["initial"] is not None]
    if before:
        lines.append(f"\nBefore round 1 (the base model, the same for every seed): {fmt(before)}")
    return "\n".join(lines)


def plot(records: list[dict], path: Path, baseline: list[float] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epsilons = sorted({setting(r) for r in records}, key=dp_settings.order)
    labels = [dp_settings.axis_label(e) for e in epsilons]
    values = {e: [r["final"]["all"] for r in records if setting(r) == e] for e in epsilons}
    if baseline and "no DP" not in values:  # no-DP runs of the real-text table, given by hand
        epsilons, labels = ["no DP", *epsilons], ["inf (no DP,\nreal-text table)", *labels]
        values["no DP"] = baseline
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    for x, eps in enumerate(epsilons):
        vals = values[eps]
        ax.scatter([x] * len(vals), vals, color="tab:blue", alpha=0.5, s=18)
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        ax.errorbar([x], [statistics.mean(vals)], yerr=[sd], fmt="o", color="black", capsize=4)
    before = [r["initial"]["all"] for r in records if r["initial"] is not None]
    if before:
        ax.axhline(statistics.mean(before), color="gray", linestyle="--", label="before round 1 (base model)")
        ax.legend(loc="lower left", fontsize=8)
    ax.set_xticks(range(len(epsilons)), labels)
    ax.set_xlabel(f"example-level epsilon per client (delta = {records[0]['delta']:g})")
    ax.set_ylabel("held-out preference accuracy (32 pairs)")
    ax.set_title("FedDPO, SmolLM2-135M, polarity pairs, 4 clients, DP-SGD", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epsilons", type=float, nargs="*", default=[math.inf, 8.0, 2.0])
    parser.add_argument("--clip-only", action="store_true", help="also run DP-SGD's clipping without noise per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--initial-seeds", type=int, nargs="*", default=[0], help="seeds that also evaluate the base")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--clip-norm", type=float, default=1.0)
    parser.add_argument("--out", default="runs/real_text/privacy_epsilon")
    parser.add_argument("--plot", default=None, help="where the PNG goes (default: OUT/utility_vs_epsilon.png)")
    parser.add_argument("--reuse", action="store_true", help="read finished runs of the same name (run.py --reuse)")
    parser.add_argument(
        "--baseline",
        type=float,
        nargs="*",
        help="plot these no-DP accuracies at eps = inf when the results hold no eps = inf run (e.g. the"
        " real-text table's FedDPO iid seeds)",
    )
    parser.add_argument("--table-only", action="store_true", help="redo the table and plot from OUT/results.jsonl")
    args = parser.parse_args()
    os.chdir(ROOT)
    if not Path(DATA, "polarity_iid_train.jsonl").exists():
        raise SystemExit(f"error: no {DATA}/polarity_iid_train.jsonl: run benchmarks/real_text/build_data.py first")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    if not args.table_only:
        log_dir = ROOT / "runs/real_text/logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        for seed in args.seeds:
            for eps, clip_only in [(e, False) for e in args.epsilons] + [(math.inf, True)] * args.clip_only:
                r = run(eps, seed, seed in args.initial_seeds, args, log_dir, clip_only)
                with open(results, "a") as fh:
                    fh.write(json.dumps(r) + "\n")
                init = "" if r["initial"] is None else f"{r['initial']['all']:.3f} -> "
                print(
                    f"{r['dp']} seed {seed}: z {r['z']:.3f} accountant eps {r['accountant_epsilon']:.3f} "
                    f"(no amplification {r['epsilon_no_amplification']:.3f}) pref_acc {init}{r['final']['all']:.3f} "
                    f"margin {r['final_reward_margin']} ({r['seconds']:.0f} s)",
                    flush=True,
                )
    records = [json.loads(line) for line in results.read_text().splitlines()]
    print(table(records))
    plot(records, Path(args.plot) if args.plot else out / "utility_vs_epsilon.png", args.baseline)


if __name__ == "__main__":
    main()
