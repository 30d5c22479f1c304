"""Peak memory of a federated run against the number of simulated clients.

Every simulated client trains on the one backbone held by the module; what a client keeps
between rounds is its personal state and its algorithm memory. With SCAFFOLD every client
that has trained holds a control variate ``c_i`` the size of the shared LoRA state, so the
expected growth from 1 to N clients is about ``(N - 1) x`` LoRA state bytes, and never a
backbone per client.

Each configuration (N = 1, 50, 200 by default) runs in a fresh subprocess: the bigger
config-built GPT-2 (4 layers, 256 hidden, byte tokenizer) with LoRA r=8, DPO, SCAFFOLD,
``clients_per_round = min(N, 50)``, ``local_steps = 1``, 2 preference pairs per client
(batch 1, sequences truncated to 32 tokens). All configurations run the same number of
rounds: the fewest with which the seeded client sampling reaches every one of the largest
N's clients (checked after the run: every client holds a control variate). Reported per
run: ``ru_maxrss`` (peak RSS), the current RSS after model build, after data setup and
after fit, the backbone and LoRA bytes, and the bytes the client store holds.

    .venv/bin/python benchmarks/memory_clients.py
    .venv/bin/python benchmarks/memory_clients.py --clients 1 50 200 400
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BIG_GPT2 = {"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 256}
MAX_PER_ROUND = 50
SEED = 0
MB = 2**20


def current_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def coverage_rounds(num_clients: int, per_round: int) -> int:
    """Fewest rounds after which the seeded sampling has picked every client at least once."""
    from lightning_fed.federation.sampling import sample_clients

    seen: set[int] = set()
    rounds = 0
    while len(seen) < num_clients:
        seen.update(sample_clients(num_clients, per_round, SEED, rounds))
        rounds += 1
    return rounds


def child(num_clients: int, rounds: int, threads: int) -> dict:
    import logging
    import tempfile
    import warnings

    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import lightning.pytorch as pl
    import torch

    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.datamodules import PreferenceDataModule
    from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings
    from lightning_fed.state import state_nbytes
    from lightning_fed.strategies import Scaffold

    torch.set_num_threads(threads)
    out: dict = {"clients": num_clients, "rounds": rounds, "rss_imports": current_rss()}
    pl.seed_everything(SEED, verbose=False)
    module = DPOModule(
        BackboneConfig(config=dict(BIG_GPT2), tokenizer="bytes"), lora=LoraSettings(r=8, alpha=16, dropout=0.0), lr=1e-3
    )
    out["backbone_bytes"] = sum(p.numel() * p.element_size() for p in module.parameters() if not p.requires_grad)
    out["lora_bytes"] = state_nbytes(module.shared_parameters())
    out["rss_model"] = current_rss()
    dm = PreferenceDataModule(
        num_clients=num_clients,
        synthetic_args={"num_clients": num_clients, "examples_per_client": 2, "groups": ["positive"]},
        batch_size=1,
        max_length=32,
        on_overflow="truncate",
        val_fraction=0.0,
    )
    dm.tokenizer = module.tokenizer
    dm.setup("fit")
    out["rss_data"] = current_rss()
    out["peak_before_fit"] = peak_rss()
    per_round = min(num_clients, MAX_PER_ROUND)
    loop = FederatedLoop(
        rounds=rounds, clients_per_round=per_round, local_steps=1, strategy=Scaffold(), seed=SEED, save_adapter=False
    )
    with tempfile.TemporaryDirectory(prefix="lf_mem_") as root:
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            default_root_dir=root,
            callbacks=[loop],
            enable_progress_bar=False,
            logger=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
        )
        t = time.perf_counter()
        trainer.fit(module, datamodule=dm)
        out["fit_seconds"] = time.perf_counter() - t
    out["peak"] = peak_rss()
    out["rss_after_fit"] = current_rss()
    # Live memory, without what the allocator keeps from freed transients (diagnostic only).
    import ctypes
    import gc

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    out["rss_trimmed"] = current_rss()
    out["steps"] = trainer.global_step
    holders = [c for c in range(num_clients) if c in loop.store and loop.store.get(c)["memory"]]
    out["clients_with_control"] = len(holders)
    out["store_bytes"] = loop.store.nbytes_in_memory
    out["per_client_store_bytes"] = out["store_bytes"] / max(1, len(holders))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--clients", type=int, nargs="+", default=[1, 50, 200], help="numbers of simulated clients (first is the base)"
    )
    parser.add_argument("--rounds", type=int, help="rounds of every run (default: full coverage of the largest N)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each run (default 1)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.rounds, args.threads)))
        return

    largest = max(args.clients)
    rounds = args.rounds or coverage_rounds(largest, min(largest, MAX_PER_ROUND))
    print(
        f"# memory_clients: N={args.clients}, clients_per_round=min(N, {MAX_PER_ROUND}), local_steps=1, "
        f"rounds={rounds} for every N, SCAFFOLD, GPT-2 {BIG_GPT2['n_layer']}x{BIG_GPT2['n_embd']}, LoRA r=8",
        flush=True,
    )
    runs = []
    for n in args.clients:
        cmd = [sys.executable, __file__, "--child", str(n), "--rounds", str(rounds), "--threads", str(args.threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=os.environ.copy())
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            raise SystemExit(f"child N={n} failed with exit code {proc.returncode}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        assert r["clients_with_control"] == n, (
            f"N={n}: only {r['clients_with_control']} clients trained; raise --rounds"
        )
        runs.append(r)
        print(
            f"# N={n}: {r['steps']} steps in {r['fit_seconds']:.1f}s, peak RSS {r['peak'] / MB:.1f} MiB,"
            f" store {r['store_bytes'] / MB:.1f} MiB for {r['clients_with_control']} clients",
            flush=True,
        )

    base = runs[0]
    lora, backbone = base["lora_bytes"], base["backbone_bytes"]
    print()
    print(
        f"Date {datetime.date.today()}, host {platform.node()}, {os.cpu_count()} CPU cores, torch threads "
        f"{args.threads}; rounds={rounds} for every N; backbone (frozen) {backbone / MB:.2f} MiB; per-client trainable "
        f"(LoRA) state {lora / MB:.3f} MiB ({lora:,} B)"
    )
    print()
    print(
        "| N clients | clients/round | steps | RSS after model MiB | RSS after data MiB | peak RSS (ru_maxrss) MiB"
        " | RSS after fit MiB | after fit + malloc_trim MiB | store MiB (clients) | store B per client |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(
            f"| {r['clients']} | {min(r['clients'], MAX_PER_ROUND)} | {r['steps']} | {r['rss_model'] / MB:.1f} | "
            f"{r['rss_data'] / MB:.1f} | {r['peak'] / MB:.1f} | {r['rss_after_fit'] / MB:.1f} | "
            f"{r['rss_trimmed'] / MB:.1f} | {r['store_bytes'] / MB:.1f} ({r['clients_with_control']}) | "
            f"{r['per_client_store_bytes']:,.0f} |"
        )
    print()
    print(
        "| growth | ΔN | peak RSS growth MiB | growth / ΔN KiB | / LoRA state | / backbone | data-setup RSS growth MiB"
        " | trimmed RSS growth / ΔN KiB | / LoRA state |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    pairs = [(base, r) for r in runs[1:]] + [(runs[i], runs[i + 1]) for i in range(1, len(runs) - 1)]
    for a, b in pairs:
        dn = b["clients"] - a["clients"]
        growth = b["peak"] - a["peak"]
        per = growth / dn
        print(
            f"| {a['clients']} -> {b['clients']} | {dn} | {growth / MB:.1f} | {per / 1024:.1f} | {per / lora:.2f} | "
            f"{per / backbone:.3f} | {(b['rss_data'] - a['rss_data']) / MB:.1f} | "
            f"{(b['rss_trimmed'] - a['rss_trimmed']) / dn / 1024:.1f} | "
            f"{(b['rss_trimmed'] - a['rss_trimmed']) / dn / lora:.2f} |"
        )


if __name__ == "__main__":
    main()
