"""FedPDPO vs the personalized-FL baselines on planted non-IID preferences (Table-1 shape).

Clients are assigned round-robin to groups that prefer opposite sides of the same planted
property (``positive`` vs ``negative`` sentiment, optionally ``formal`` vs ``casual``
sign-offs), so no single global model can satisfy every client. Each method runs with the
DPO objective on a tiny GPT-2 built from a config (byte tokenizer), full participation,
FedAvg (|D_i|-weighted) unless the method is a strategy (FedAMP). The metric is the paper's
preference accuracy, ``log p(y_w|x) > log p(y_l|x)`` under each client's personalized model,
on each client's held-out pairs after the last round: per client, mean, and worst client.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/fedpdpo_table.py --out benchmarks/results_fedpdpo.md

The ablations (A1 without bottleneck, A2 without reward head) run as two more rows.
The setting ``2 tastes, 4 clients, distractors`` uses ``synthetic:hard_preferences`` with
``distractor=1`` (each pair also differs, on a random side, in the property the client does
not care about), where the per-client models stay off the ceiling; the ablation test
(``tests/modules/test_pdpo_ablation.py``) uses it with ``--examples 96 --local-steps 6 --lr 2e-3``.
"""

from __future__ import annotations

import argparse
import os
import shlex
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
import torch  # noqa: E402

from lightning_fed.callbacks import FederatedLoop  # noqa: E402
from lightning_fed.datamodules import PreferenceDataModule  # noqa: E402
from lightning_fed.evaluation import PersonalizedEvaluation, client_accuracy  # noqa: E402
from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings  # noqa: E402
from lightning_fed.modules.fedper import FedPerModule  # noqa: E402
from lightning_fed.modules.fedrep import FedRepModule  # noqa: E402
from lightning_fed.modules.pdpo import PDPOModule  # noqa: E402
from lightning_fed.modules.perfedavg import PerFedAvgModule  # noqa: E402
from lightning_fed.strategies import FedAvg  # noqa: E402
from lightning_fed.strategies.fedamp import FedAMP  # noqa: E402

GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 256}
LR, BETA = 5e-3, 0.5


def common() -> dict:
    return {
        "backbone": BackboneConfig(config=dict(GPT2), tokenizer="bytes"),
        "lora": LoraSettings(r=4, alpha=8, dropout=0.0),
        "lr": LR,
        "beta": BETA,
    }


def pdpo(**kw):
    return PDPOModule(**common(), bottleneck_dim=16, reward_hidden=32, bottleneck_dropout=0.0, reward_dropout=0.0, **kw)


# name -> (module factory, strategy factory, extra callbacks, batch-size multiplier)
METHODS = {
    "FedAvg (+DPO)": (lambda a: DPOModule(**common()), FedAvg, [], 1),
    "Per-FedAvg (+DPO)": (
        lambda a: PerFedAvgModule(**common(), inner_lr=a.inner_lr, inner_steps=1, eval_adapt_steps=1),
        FedAvg,
        [PersonalizedEvaluation],
        2,
    ),
    "FedAMP (+DPO)": (
        lambda a: DPOModule(**common()),
        lambda: FedAMP(temperature=0.5, self_weight_floor=0.05),
        [PersonalizedEvaluation],
        1,
    ),
    "FedPer (+DPO)": (lambda a: FedPerModule(**common(), shared_layers=1), FedAvg, [], 1),
    "FedRep (+DPO)": (lambda a: FedRepModule(**common(), head_steps=a.local_steps // 2), FedAvg, [], 1),
    "FedPDPO": (lambda a: pdpo(), FedAvg, [], 1),
    "FedPDPO w/o bottleneck (A1)": (lambda a: pdpo(use_bottleneck=False), FedAvg, [], 1),
    "FedPDPO w/o reward head (A2)": (lambda a: pdpo(use_reward_head=False), FedAvg, [], 1),
}
MAIN = list(METHODS)[:6]


# name -> (clients, taste groups, synthetic set, its extra arguments)
SETTINGS = {
    "2 tastes, 4 clients": (4, ["positive", "negative"], "preferences", {}),
    "4 tastes, 8 clients": (8, ["positive", "negative", "formal", "casual"], "preferences", {}),
    "2 tastes, 4 clients, distractors": (4, ["positive", "negative"], "hard_preferences", {"distractor": 1.0}),
}


def run(name: str, setting: str, seed: int, args: argparse.Namespace, root: str) -> dict:
    make_module, make_strategy, callbacks, bs_mult = METHODS[name]
    clients, groups, synthetic_set, extra = SETTINGS[setting]
    pl.seed_everything(seed, verbose=False)
    module = make_module(args)
    synthetic = {"num_clients": clients, "examples_per_client": args.examples, "groups": groups, "seed": seed, **extra}
    data = PreferenceDataModule(
        dataset=f"synthetic:{synthetic_set}",
        num_clients=clients,
        synthetic_args=synthetic,
        batch_size=args.batch_size * bs_mult,
        eval_batch_size=args.batch_size,
        max_length=160,
        val_fraction=0.25,
        seed=seed,
    )
    loop = FederatedLoop(
        rounds=args.rounds, clients_per_round=clients, local_steps=args.local_steps, strategy=make_strategy(), seed=seed
    )
    trainer = pl.Trainer(
        default_root_dir=root,
        callbacks=[loop, *(c() for c in callbacks)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=data)
    acc = client_accuracy(loop.server.report.history[-1])
    acc["seconds"] = time.perf_counter() - t0
    acc["up_bytes"] = loop.server.report.history[-1]["up_bytes"] // clients
    acc["personal_bytes"] = sum(p.numel() * p.element_size() for p in module.personal_parameters().values())
    return acc


def fmt(values: list[float]) -> str:
    mean = 100 * statistics.mean(values)
    return f"{mean:.1f}" if len(values) == 1 else f"{mean:.1f}±{100 * statistics.stdev(values):.1f}"


def main() -> None:
    global LR
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS)[:2], choices=list(SETTINGS))
    parser.add_argument("--examples", type=int, default=64, help="pairs per client (a quarter held out)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--local-steps", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=LR, help="learning rate of every method (lr_h = lr_w = lr)")
    parser.add_argument("--inner-lr", type=float, default=0.5, help="Per-FedAvg alpha (SGD on LoRA)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=str, default=None)
    args = parser.parse_args()
    LR = args.lr
    torch.set_num_threads(args.threads)
    results: dict[tuple[str, str], list[dict]] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        for setting in args.settings:
            for name in args.methods:
                runs = [run(name, setting, seed, args, f"{root}/{len(results)}-{seed}") for seed in args.seeds]
                results[setting, name] = runs
                print(
                    f"{setting} | {name}: mean {fmt([r['mean'] for r in runs])} worst {fmt([r['worst'] for r in runs])}"
                    f" ({sum(r['seconds'] for r in runs):.0f}s)",
                    flush=True,
                )
    total = time.perf_counter() - t0
    command = "HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/fedpdpo_table.py " + shlex.join(sys.argv[1:])
    out = [
        f"Preference accuracy (%) on each client's held-out pairs after round {args.rounds}, mean±std over seeds "
        f"{args.seeds} (data, model and sampling seeded together). Clients join taste groups round-robin; opposite "
        f"groups prefer opposite sides of the same planted property. {args.examples} pairs per client (a quarter held "
        f"out), {args.local_steps} local steps of batch {args.batch_size} (Per-FedAvg: batch {2 * args.batch_size}, "
        f"split into D and D'), every client every round, FedAvg by |D_i| except FedAMP. Tiny GPT-2 ({GPT2['n_layer']} "
        f"layers, hidden {GPT2['n_embd']}, byte tokens) built from a config, LoRA r=4, lr {LR}, beta {BETA}. "
        f"{total / 60:.1f} min on {args.threads} CPU thread(s).",
        "",
        f"`{command}`",
        "",
        "| Method | "
        + " | ".join(f"{s}: Avg. | {s}: worst client" for s in args.settings)
        + " | upload B/client/round | personal B/client |",
        "|---|" + "---:|" * (2 * len(args.settings) + 2),
    ]
    for name in args.methods:
        cells = []
        for setting in args.settings:
            runs = results[setting, name]
            cells += [fmt([r["mean"] for r in runs]), fmt([r["worst"] for r in runs])]
        first = results[args.settings[0], name][0]
        out.append(f"| {name} | " + " | ".join(cells) + f" | {first['up_bytes']:,} | {first['personal_bytes']:,} |")
    last = args.settings[-1]
    clients, groups = SETTINGS[last][:2]
    out += [
        "",
        f"Per client ({last}; Table 10 shape):",
        "",
        "| Method | " + " | ".join(f"C{c} ({groups[c % len(groups)]})" for c in range(clients)) + " |",
        "|---|" + "---:|" * clients,
    ]
    for name in args.methods:
        runs = results[last, name]
        out.append(f"| {name} | " + " | ".join(fmt([r["clients"][c] for r in runs]) for c in range(clients)) + " |")
    table = "\n".join(out) + "\n"
    print(table)
    if args.out:
        Path(args.out).write_text(
            "## FedPDPO and the personalized baselines on planted non-IID preferences (issue 4)\n\n" + table
        )


if __name__ == "__main__":
    main()
