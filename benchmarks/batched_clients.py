"""K clients trained together vs one after another: round time, tokens per second, peak memory.

Two measurements, each on the tiny config-built GPT-2 (``--model tiny``, configs/tiny.yaml's
settings) or SmolLM2-135M-Instruct (``--model smollm2``):

* **time** (default): for each K in ``--clients``, ``--fits`` fits per mode, alternating
  (sequential, batched, batched, sequential, ...), each ``--rounds`` rounds of K clients
  (``clients_per_round = K``) x ``--local-steps`` steps of ``--batch`` pairs (DPO) of at most
  ``--length`` tokens (the synthetic preference set, truncated), through the
  :class:`~lightning_fed.callbacks.FederatedLoop` with ``federation.batch_clients`` ``off``
  (sequential) or K (batched). A round is one Lightning epoch: its process CPU time (steadier
  than wall time on a shared CPU) and wall time are taken from the epoch's start to its end; the
  first round of each fit is a warm-up and untimed. Reported per mode: the median round over
  the fits, the batched / sequential ratio of the medians, and tokens per second per client (a
  client's tokens in the round, attention mask summed, / the round's wall time; also per CPU
  second, which a loaded shared machine does not distort). On a GPU
  (``--device cuda``) the rounds are timed after ``torch.cuda.synchronize``, the GPU's
  utilisation is sampled every 0.1 s during each fit (``torch.cuda.utilization``, else
  ``nvidia-smi``), the peak is ``torch.cuda.max_memory_allocated`` per fit, and the planner's
  largest K for the device's memory is printed (:func:`~lightning_fed.planning.group.batched_group_size`).
* **memory** (``--memory``, CPU only): for each K in ``--clients``, ascending, one group step in a child
  process started with ``MALLOC_MMAP_THRESHOLD_=65536`` (as ``benchmarks/peak_memory.py
  --live``: freed blocks go back to the OS, so ``ru_maxrss`` is the peak of live memory, what
  the planner estimates); the child reports ``ru_maxrss`` after each K, and the peak grows with
  K, so each K's figure is its own step's peak. Beside it the planner's
  :func:`~lightning_fed.planning.group.estimate_group` and their ratio. ``--fit-gib`` adds the
  largest K the planner fits in that many GiB
  (:func:`~lightning_fed.planning.group.batched_group_size`).

Torch runs with ``--threads`` intra-op threads (default 1: the CPU is shared).

    nice -n 10 .venv/bin/python benchmarks/batched_clients.py --model tiny --clients 4 16
    nice -n 10 .venv/bin/python benchmarks/batched_clients.py --model tiny --memory --clients 1 4 16
    nice -n 10 .venv/bin/python benchmarks/batched_clients.py --model smollm2 --clients 4 16 --rounds 3
    nice -n 10 .venv/bin/python benchmarks/batched_clients.py --model smollm2 --memory --clients 1 4 16 --fit-gib 24
    python benchmarks/batched_clients.py --model smollm2 --clients 16 --device cuda --precision bf16-mixed
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))  # a site-packages "benchmarks" would shadow this folder

from peak_memory import SMOLLM2, rss_now  # noqa: E402  (the planner benchmark's measuring code)

TINY_GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 256}
# name -> (backbone section, LoRA r, default batch, default length); tiny: configs/tiny.yaml's settings
MODELS = {
    "tiny": ({"config": dict(TINY_GPT2), "tokenizer": "bytes"}, 4, 4, 160),
    "smollm2": ({"name_or_path": SMOLLM2}, 8, 1, 64),
}
PRECISIONS = {"32-true": "float32", "bf16-mixed": "bfloat16"}
GIB = 2**30


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def build_module(model: str, objective: str, seed: int = 0):
    import lightning.pytorch as pl

    from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings, SFTModule

    backbone, r, _, _ = MODELS[model]
    pl.seed_everything(seed, verbose=False)
    cls = DPOModule if objective == "dpo" else SFTModule
    kwargs = {"beta": 0.1, "cache_reference": False} if objective == "dpo" else {}
    return cls(BackboneConfig(**backbone), lora=LoraSettings(r=r, alpha=2 * r, dropout=0.0), lr=1e-4, **kwargs)


def client_batches(module, objective: str, clients: int, steps: int, batch: int, length: int, seed: int = 0):
    """``[client][step] -> batch`` of random full-length token ids (the second half scored)."""
    import torch

    vocab = module.model.get_base_model().config.vocab_size
    g = torch.Generator().manual_seed(seed)
    out = []
    for client in range(clients):
        turn = []
        for _ in range(steps):
            ids = torch.randint(0, vocab, (2 * batch if objective == "dpo" else batch, length), generator=g)
            labels = ids.clone()
            labels[:, : length // 2] = -100
            mask = torch.ones_like(ids)
            if objective == "dpo":
                turn.append(
                    {
                        "chosen_input_ids": ids[:batch],
                        "rejected_input_ids": ids[batch:],
                        "chosen_attention_mask": mask[:batch],
                        "rejected_attention_mask": mask[batch:],
                        "chosen_labels": labels[:batch],
                        "rejected_labels": labels[batch:],
                    }
                )
            else:
                turn.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
            turn[-1]["client_id"] = torch.full((batch,), client)  # each row's client (the loss per client)
        out.append(turn)
    return out


def planner_inputs(model: str, objective: str, batch: int, length: int, dtype: str = "float32"):
    from lightning_fed.planning.estimate import PlanInputs, model_shape

    backbone, r, _, _ = MODELS[model]
    shape = model_shape(backbone)
    return shape, PlanInputs(
        batch_size=batch, max_length=length, lora_r=r, lora_dropout=0.0, objective=objective, dtype=dtype
    )


# ---------------------------------------------------------------- one group step, for memory
class GroupStep:
    """K clients' step through the batching engine, outside the loop: the module's adapters
    stacked K times (:class:`~lightning_fed.batching.multi_lora.StackedLora`), each row tagged
    with its client (:class:`~lightning_fed.batching.client_rows.ClientRows`), the loss reduced
    per client as the module's ``training_step`` does, one AdamW step over the stacked factors."""

    def __init__(self, module, objective: str, clients: int, batch: int) -> None:

        from lightning_fed.batching.client_rows import ClientRows
        from lightning_fed.batching.multi_lora import StackedLora

        self.module, self.objective = module, objective
        self.rows = ClientRows.of([k for k in range(clients) for _ in range(batch)], clients)  # the usual step
        self.stacked = StackedLora(module.model, module.shared_parameters(), lambda: self.rows)
        for _ in range(clients):
            self.stacked.capture()
        self.stacked.stack()
        self.optimizer = module.configure_optimizers()

    def step(self, batches: list[dict]) -> float:
        import torch

        batch = {n: torch.cat([b[n] for b in batches]) for n in batches[0]}
        loss = self.module.training_step(batch, 0)["loss"]  # each row's client_id: the per-client loss
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def close(self) -> None:
        self.stacked.unstack()


# ---------------------------------------------------------------- memory
def memory_child(model: str, objective: str, ks: list[int], batch: int, length: int) -> list[dict]:
    import torch

    torch.manual_seed(0)
    before = rss_now()
    module = build_module(model, objective)
    module.train()
    loaded = rss_now()
    rows = []
    for k in sorted(ks):
        batches = client_batches(module, objective, k, 1, batch, length)
        group = GroupStep(module, objective, k, batch)
        loss = group.step([turn[0] for turn in batches])
        group.close()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        rows.append({"clients": k, "rss_before_load": before, "rss_after_load": loaded, "peak_rss": peak, "loss": loss})
        del group, batches
    return rows


def run_memory(args) -> list[dict]:
    from lightning_fed.planning.group import batched_group_size, estimate_group

    cmd = [sys.executable, __file__, "--child-memory", "--model", args.model, "--objective", args.objective]
    cmd += ["--batch", str(args.batch), "--length", str(args.length), "--threads", str(args.threads)]
    cmd += ["--clients", *map(str, args.clients)]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"memory child failed with exit code {proc.returncode}")
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    shape, p = planner_inputs(args.model, args.objective, args.batch, args.length)
    for row in rows:
        plan = estimate_group(shape, p, row["clients"])
        row["estimate"] = plan.total
        row["estimate_items"] = plan.items
        row["ratio"] = plan.total / row["peak_rss"]
    print(
        f"\nmemory: {args.model}, {args.objective}, batch {args.batch} x {args.length} tokens per client,"
        f" one group step, MALLOC_MMAP_THRESHOLD_=65536"
    )
    print(f"{'K':>4} {'peak RSS MiB':>13} {'planner MiB':>12} {'planner/peak':>13}")
    for row in rows:
        print(
            f"{row['clients']:>4} {row['peak_rss'] / 2**20:13.0f} {row['estimate'] / 2**20:12.0f} {row['ratio']:13.2f}"
        )
    if args.fit_gib:
        k = batched_group_size(shape, p, args.fit_clients, budget_bytes=int(args.fit_gib * GIB))
        print(f"largest K the planner fits in {args.fit_gib} GiB (of {args.fit_clients} clients): {k}")
        rows.append({"fit_gib": args.fit_gib, "largest_k": k})
    return rows


# ---------------------------------------------------------------- time
class UtilisationSampler:
    """GPU utilisation (%) sampled every 0.1 s in a thread: ``torch.cuda.utilization`` or ``nvidia-smi``."""

    def __init__(self, device) -> None:
        self.device, self.samples, self._stop = device, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> float | None:
        import torch

        try:
            return float(torch.cuda.utilization(self.device))
        except Exception:  # no pynvml: ask nvidia-smi
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                ).stdout
                return float(out.split()[0])
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                return None

    def _run(self) -> None:
        while not self._stop.is_set():
            value = self._read()
            if value is not None:
                self.samples.append(value)
            self._stop.wait(0.1)

    def __enter__(self) -> UtilisationSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


class RoundTimer:
    """A callback: process CPU and wall time of each round (one Lightning epoch), and its tokens."""

    def __init__(self, cuda: bool) -> None:
        from lightning.pytorch.callbacks import Callback

        timer = self

        class _Timer(Callback):
            def on_train_epoch_start(self, trainer, pl_module) -> None:
                timer._sync()
                timer.tokens.append(0)
                timer._start = (time.process_time(), time.perf_counter())

            def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
                timer.tokens[-1] += sum(int(t.sum()) for n, t in batch.items() if n.endswith("attention_mask"))

            def on_train_epoch_end(self, trainer, pl_module) -> None:
                timer._sync()
                c, w = timer._start
                timer.rounds.append((time.process_time() - c, time.perf_counter() - w))

        self.cuda, self.rounds, self.tokens = cuda, [], []
        self.callback = _Timer()

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()


def round_data(module, clients: int, steps: int, batch: int, length: int):
    """The synthetic preference set of ``clients`` clients, enough pairs for ``steps`` batches each."""
    from lightning_fed.datamodules import PreferenceDataModule

    dm = PreferenceDataModule(
        num_clients=clients,
        synthetic_args={"num_clients": clients, "examples_per_client": steps * batch, "groups": ["positive"]},
        batch_size=batch,
        max_length=length,
        on_overflow="truncate",
        val_fraction=0.0,
    )
    dm.tokenizer = module.tokenizer
    dm.setup("fit")
    return dm


def fit_rounds(args, k: int, batch_clients, dm, device) -> dict:
    """``args.rounds`` rounds of ``k`` clients, ``batch_clients`` (``off`` or K); per-round times."""
    import tempfile

    import lightning.pytorch as pl
    import torch

    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.strategies import FedAvg

    cuda = device.type == "cuda"
    module = build_module(args.model, args.objective)
    settings = {"batch_clients": batch_clients} if batch_clients != "off" else {}
    loop = FederatedLoop(
        rounds=args.rounds,
        clients_per_round=k,
        local_steps=args.local_steps,
        strategy=FedAvg(),
        seed=0,
        save_adapter=False,
        **settings,
    )
    timer = RoundTimer(cuda)
    with tempfile.TemporaryDirectory(prefix="lf_batched_") as root:
        trainer = pl.Trainer(
            accelerator="gpu" if cuda else "cpu",
            devices=1,
            precision=args.precision,
            default_root_dir=root,
            callbacks=[timer.callback, loop],
            enable_progress_bar=False,
            logger=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
        )
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
            with UtilisationSampler(device) as sampler:
                trainer.fit(module, datamodule=dm)
        else:
            sampler = None
            trainer.fit(module, datamodule=dm)
    out = {"rounds": timer.rounds[1:], "tokens": timer.tokens[1:], "group_size": getattr(loop, "group_size", 1)}
    if cuda:
        out["peak_allocated"] = torch.cuda.max_memory_allocated(device)
        out["gpu_util_pct"] = sampler.mean
    return out


def run_time(args) -> list[dict]:
    import torch

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    rows = []
    for k in args.clients:
        dm = round_data(build_module(args.model, args.objective), k, args.local_steps, args.batch, args.length)
        runs: dict[str, list[dict]] = {"sequential": [], "batched": []}
        for rep in range(args.fits):
            for mode in ("sequential", "batched") if rep % 2 == 0 else ("batched", "sequential"):
                runs[mode].append(fit_rounds(args, k, "off" if mode == "sequential" else k, dm, device))
        row = {"clients": k}
        for mode, fits in runs.items():
            rounds = [r for f in fits for r in f["rounds"]]
            tokens = statistics.median(t for f in fits for t in f["tokens"])
            row[f"{mode}_cpu_s"] = statistics.median(c for c, _ in rounds)
            row[f"{mode}_wall_s"] = statistics.median(w for _, w in rounds)
            row[f"{mode}_tokens_per_client"] = tokens / k
            row[f"{mode}_tokens_per_s_per_client"] = tokens / k / row[f"{mode}_wall_s"]
            row[f"{mode}_tokens_per_cpu_s_per_client"] = tokens / k / row[f"{mode}_cpu_s"]
            row[f"{mode}_group_size"] = fits[0]["group_size"]
            row[f"{mode}_rounds_timed"] = len(rounds)
            if cuda:
                row[f"{mode}_peak_allocated"] = max(f["peak_allocated"] for f in fits)
                utils = [f["gpu_util_pct"] for f in fits if f["gpu_util_pct"] is not None]
                row[f"{mode}_gpu_util_pct"] = statistics.fmean(utils) if utils else None
        if cuda:  # the largest group the planner fits in this device's memory (batch_clients: auto)
            from lightning_fed.planning.group import batched_group_size

            shape, p = planner_inputs(args.model, args.objective, args.batch, args.length, PRECISIONS[args.precision])
            row["planner_largest_k_on_device"] = batched_group_size(shape, p, 4096, device=device)
        row["ratio_cpu"] = row["batched_cpu_s"] / row["sequential_cpu_s"]
        row["ratio_wall"] = row["batched_wall_s"] / row["sequential_wall_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(
        f"\ntime: {args.model}, {args.objective}, {args.local_steps} local steps of {args.batch} x <= {args.length}"
        f" tokens per client, {args.fits} fits per mode of {args.rounds} rounds (first round of each untimed),"
        f" {args.device} {args.precision}, torch threads {args.threads},"
        f" {torch.cuda.get_device_name(device) if cuda else cpu_model()}"
    )
    print(
        f"{'K':>4} {'seq CPU s':>10} {'batched CPU s':>14} {'ratio CPU':>10} {'seq wall s':>11} {'batched wall s':>15}"
        f" {'ratio wall':>11} {'tok/s/client seq':>17} {'batched':>8}"
    )
    for r in rows:
        print(
            f"{r['clients']:>4} {r['sequential_cpu_s']:10.2f} {r['batched_cpu_s']:14.2f} {r['ratio_cpu']:10.3f}"
            f" {r['sequential_wall_s']:11.2f} {r['batched_wall_s']:15.2f} {r['ratio_wall']:11.3f}"
            f" {r['sequential_tokens_per_s_per_client']:17.1f} {r['batched_tokens_per_s_per_client']:8.1f}"
        )
        if cuda:
            print(
                f"     GPU utilisation seq {r['sequential_gpu_util_pct'] or float('nan'):.0f}%,"
                f" batched {r['batched_gpu_util_pct'] or float('nan'):.0f}%; peak allocated seq"
                f" {r['sequential_peak_allocated'] / GIB:.2f} GiB, batched {r['batched_peak_allocated'] / GIB:.2f} GiB;"
                f" planner's largest K on this device {r['planner_largest_k_on_device']}"
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
    parser.add_argument("--objective", choices=["dpo", "sft"], default="dpo")
    parser.add_argument("--clients", type=int, nargs="+", default=[4, 16], help="K values")
    parser.add_argument("--batch", type=int, help="pairs (dpo) or sequences (sft) per client step")
    parser.add_argument("--length", type=int, help="tokens per sequence")
    parser.add_argument("--local-steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4, help="rounds per fit (the first is untimed)")
    parser.add_argument("--fits", type=int, default=2, help="fits per mode, alternating")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=sorted(PRECISIONS), default="32-true")
    parser.add_argument("--memory", action="store_true", help="peak memory per K against the planner")
    parser.add_argument("--fit-gib", type=float, help="with --memory: the planner's largest K in this many GiB")
    parser.add_argument("--fit-clients", type=int, default=1024, help="clients per round for --fit-gib")
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--child-memory", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    _, _, batch, length = MODELS[args.model]
    args.batch, args.length = args.batch or batch, args.length or length
    import torch

    torch.set_num_threads(args.threads)
    if args.child_memory:
        print(json.dumps(memory_child(args.model, args.objective, args.clients, args.batch, args.length)))
        return
    rows = run_memory(args) if args.memory else run_time(args)
    print(json.dumps(rows))  # the last line: the rows, for scripts and tests
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
