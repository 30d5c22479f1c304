"""OpenFedLLM's headline on real text: federated instruction tuning (FedIT, FedAvg) against each
client training alone on its own data (Ye et al., 2024, Sec. 5, Tables 2-3: "FL methods
consistently outperform local training"), by the same code, over several seeds.

Data: BIG-bench's JSON tasks (the ``bigbench`` sdist on PyPI, see
:mod:`lightning_fed.datamodules.bigbench`), filtered as in ``fedhds.py``: each client holds one
task (``ByKey(task)``, non-IID as in the paper's instruction-tuning setting). Two test sets:

* **held-out tasks**, tasks no client trained on (the paper's general benchmarks: what the
  data of the others add to a client's model);
* **own task**, unseen rows of each client's own task (the paper's domain-specific setting,
  where local training is the strongest baseline).

Methods, same model (SmolLM2-135M-Instruct, LoRA r 8), same optimizer, batch and schedule:

* ``fedit``: every client in every round, one local epoch over its rows, FedAvg weighted by
  the samples, ``--rounds`` rounds: one global model;
* ``local``: each client alone (a federation of one: the same loop, FedAvg of one client), the
  same rounds of one local epoch on its own rows: one model per client, the same local compute;
* ``base``: the untrained model.

Metric: answer NLL (nats/token, teacher-forced) per test prompt. FedIT minus local: on
held-out tasks, prompt i's difference is FedIT's NLL minus the mean over the client models
(a random client's local model); on the own task, FedIT minus the client's own local model on
its rows. Each difference is paired over seeds and prompts, with ``common.py``'s error model:
the seed part, and the sampling part clustered by task (the held-out task of a prompt; the
client's task of an own-task row), decided at Student's t with Welch-Satterthwaite df.

    nice -n 15 .venv/bin/python benchmarks/papers/openfedllm.py --bigbench bigbench-1.0.0 --out openfedllm.jsonl
    .venv/bin/python benchmarks/papers/openfedllm.py --summarize openfedllm.jsonl
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import append_run, blocks, by_method, call, paired, read_runs, sd  # noqa: E402
from fedhds import build_module, scorable  # noqa: E402  (the same model and filters)

from lightning_fed.callbacks import FederatedLoop  # noqa: E402
from lightning_fed.datamodules import InstructionDataModule  # noqa: E402
from lightning_fed.datamodules.bigbench import held_out_split, load_bigbench, write_jsonl  # noqa: E402
from lightning_fed.datamodules.partition import ByKey  # noqa: E402
from lightning_fed.selection.baselines import perplexities  # noqa: E402


def build_data(args: argparse.Namespace, folder: Path) -> dict:
    """Client tasks (``--per-client`` training rows + ``--own-test`` unseen rows each) and
    held-out tasks (``--test-per-task`` rows each), fixed by ``--data-seed``."""
    records = load_bigbench(
        args.bigbench,
        min_per_task=args.per_client + args.own_test,
        max_input_words=args.max_input_words,
        max_output_words=args.max_output_words,
        seed=args.data_seed,
    )
    by_task: dict[str, list[dict]] = {}
    for r in records:
        by_task.setdefault(r["task"], []).append(r)
    ok = {
        t
        for t, rows in by_task.items()
        if np.mean([scorable(r["output"]) for r in rows]) > 0.9
        and len(rows[0]["instruction"].split()) <= args.max_instruction_words
    }
    records = [r for t in sorted(ok) for r in by_task[t] if scorable(r["output"])]
    train, test = held_out_split(records, args.held_out, args.data_seed)
    rng = np.random.default_rng(args.data_seed)
    sizes = Counter(r["task"] for r in train)
    names = sorted(t for t, n in sizes.items() if n >= args.per_client + args.own_test)
    clients = sorted(rng.permutation(names)[: args.clients].tolist())
    own_train, own_test = [], {}
    for i, task in enumerate(clients):
        rows = [r for r in train if r["task"] == task]
        order = np.random.default_rng([args.data_seed, i]).permutation(len(rows))
        own_train += [rows[j] for j in np.sort(order[: args.per_client])]
        own_test[task] = [rows[j] for j in np.sort(order[args.per_client : args.per_client + args.own_test])]
    held_out = []
    for i, task in enumerate(sorted({r["task"] for r in test})):
        rows = [r for r in test if r["task"] == task]
        keep = np.sort(np.random.default_rng([args.data_seed, 100 + i]).permutation(len(rows))[: args.test_per_task])
        held_out += [rows[j] for j in keep]
    write_jsonl(own_train, folder / "train.jsonl")
    for task in clients:
        write_jsonl([r for r in own_train if r["task"] == task], folder / f"train-{task}.jsonl")
    return {"clients": clients, "held_out": held_out, "own_test": own_test}


def fit(dataset: Path, num_clients: int, seed: int, args: argparse.Namespace, root: Path):
    """One federation (``num_clients`` = 1: a client alone); returns the module and its data."""
    module = build_module(args, seed)
    data = InstructionDataModule(
        dataset=str(dataset),
        num_clients=max(num_clients, 1),
        partition=ByKey("task"),
        template="alpaca",
        batch_size=args.batch_size,
        max_length=args.max_length,
        on_overflow="drop",
        val_fraction=0.0,
        seed=args.data_seed,
    )
    if not num_clients:  # the untrained model: the template and encoding only
        data.tokenizer = module.tokenizer
        data.setup("fit")
        return module, data
    loop = FederatedLoop(
        rounds=args.rounds,
        clients_per_round=num_clients,
        local_steps=None,
        local_epochs=1,
        seed=seed,
        isolate_failures=False,
        save_adapter=False,
    )
    trainer = pl.Trainer(
        default_root_dir=str(root),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        callbacks=[loop],
    )
    trainer.fit(module, datamodule=data)
    return module, data


def nll(module, data: InstructionDataModule, rows: list[dict]) -> list[float]:
    """Answer NLL (nats/token) of each row, teacher-forced."""
    items = [data.encode(r) for r in rows]
    return np.log(perplexities(module.model, items, module.tokenizer.pad_token_id)).tolist()


def run(method: str, seed: int, args: argparse.Namespace, folder: Path, info: dict) -> dict:
    t0 = time.perf_counter()
    held_out, own = info["held_out"], info["own_test"]
    if method in ("fedit", "base"):
        n = len(info["clients"]) if method == "fedit" else 0
        module, data = fit(folder / "train.jsonl", n, seed, args, folder / f"{method}-{seed}")
        out = {"held_out": nll(module, data, held_out), "own": {t: nll(module, data, own[t]) for t in own}}
    elif method == "local":
        per_client, own_scores = [], {}
        for task in info["clients"]:
            module, data = fit(folder / f"train-{task}.jsonl", 1, seed, args, folder / f"local-{task}-{seed}")
            per_client.append(nll(module, data, held_out))
            own_scores[task] = nll(module, data, own[task])
        out = {"held_out": np.mean(per_client, axis=0).tolist(), "held_out_per_client": per_client, "own": own_scores}
    else:
        raise ValueError(f"`--methods` must be among fedit, local, base, got {method!r}")
    out["held_out_task"] = [r["task"] for r in held_out]
    return {"method": method, "seed": seed, "seconds": time.perf_counter() - t0, **out}


def verdict(p) -> str:
    return call(p, "local better", "FedIT better")


def held_out_task(r: dict) -> list:
    """The task of each held-out prompt: recorded (``held_out_task``), or for the earlier runs
    derived from their args: ``build_data`` lays the prompts out in sorted task order,
    ``test_per_task`` each, ``held_out`` tasks (refused when the count does not match)."""
    if "held_out_task" in r:
        return r["held_out_task"]
    return blocks(len(r["held_out"]), r["args"]["test_per_task"], r["args"]["held_out"])


def summarize(results: list[dict]) -> list[str]:
    by = by_method(results)
    flat = lambda r: [x for t in sorted(r["own"]) for x in r["own"][t]]  # noqa: E731
    own_task = lambda r: [t for t in sorted(r["own"]) for _ in r["own"][t]]  # noqa: E731
    lines = ["| method | seeds | held-out tasks NLL (seed SD) | own task NLL (seed SD) |", "|---|---|---|---|"]
    for m, runs in by.items():
        h = [np.mean(r["held_out"]) for r in runs.values()]
        o = [np.mean(flat(r)) for r in runs.values()]
        lines.append(f"| {m} | {sorted(runs)} | {np.mean(h):.3f} ({sd(h):.3f}) | {np.mean(o):.3f} ({sd(o):.3f}) |")
    if "fedit" in by and "local" in by:
        tests = (
            ("held-out tasks", lambda r: r["held_out"], held_out_task),
            ("own task", flat, own_task),
        )
        for name, key, task in tests:
            clusters = {tuple(task(r)) for runs in (by["fedit"], by["local"]) for r in runs.values()}
            if len(clusters) != 1:
                raise ValueError(f"the runs do not share one {name} test set")
            clusters = list(next(iter(clusters)))
            a = {s: key(r) for s, r in by["fedit"].items()}
            b = {s: key(r) for s, r in by["local"].items()}
            p = paired(a, b, clusters)
            lines.append(f"FedIT minus local, {name}: {p.describe(' nats/token', 'tasks')}: {verdict(p)}")
            seeds = sorted(set(a) & set(b))
            d = np.mean([np.subtract(a[s], b[s]) for s in seeds], axis=0)
            names = sorted(set(clusters), key=clusters.index)
            per = {t: d[np.array(clusters) == t].mean() for t in names}
            lines.append("  per seed: " + ", ".join(f"{s}: {v:+.3f}" for s, v in zip(seeds, p.per_seed)))
            lines.append(
                "  per task (share of the sum): "
                + ", ".join(f"{t} {v:+.3f} ({100 * v / sum(per.values()):.0f}%)" for t, v in per.items())
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bigbench", default=None, help="bigbench-1.0.0.tar.gz (pip download --no-deps bigbench)")
    parser.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    parser.add_argument("--methods", nargs="+", default=["fedit", "local"], choices=["fedit", "local", "base"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--clients", type=int, default=4, help="tasks, one per client; all take part each round")
    parser.add_argument("--per-client", type=int, default=16, help="training rows per client")
    parser.add_argument("--own-test", type=int, default=8, help="unseen rows of each client's task")
    parser.add_argument("--held-out", type=int, default=8, help="held-out tasks")
    parser.add_argument("--test-per-task", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--max-length", type=int, default=512, help="training and test rows (no test row may overflow)")
    parser.add_argument("--max-input-words", type=int, default=60)
    parser.add_argument("--max-output-words", type=int, default=10)
    parser.add_argument("--max-instruction-words", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="append each run's result as a JSON line here")
    parser.add_argument("--summarize", nargs="+", default=None, help="only print the tables of these --out files")
    args = parser.parse_args()
    if args.summarize:
        print("\n".join(summarize(read_runs(args.summarize))))
        return
    if args.bigbench is None:
        parser.error("--bigbench is required (bigbench-1.0.0.tar.gz from `pip download --no-deps bigbench==1.0.0`)")
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    results = []
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        info = build_data(args, folder)
        print(
            f"data: clients {info['clients']} x {args.per_client} rows (+{args.own_test} own test rows each); "
            f"{len(info['held_out'])} held-out prompts from {len({r['task'] for r in info['held_out']})} tasks",
            flush=True,
        )
        for seed in args.seeds:
            for method in args.methods:
                r = run(method, seed, args, folder, info)
                results.append(r)
                own = np.mean([x for v in r["own"].values() for x in v])
                print(
                    f"seed {seed} {method}: held-out NLL {np.mean(r['held_out']):.3f} own-task NLL {own:.3f} "
                    f"({r['seconds']:.0f}s)",
                    flush=True,
                )
                append_run(args.out, r, vars(args))
    print(
        f"model={args.model} seeds={args.seeds} rounds={args.rounds} clients={args.clients} "
        f"per_client={args.per_client} batch={args.batch_size} lr={args.lr}"
    )
    print("\n".join(summarize(results)))


if __name__ == "__main__":
    main()
