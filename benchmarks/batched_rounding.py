"""How far batched clients' uploads are from sequential ones, against how far two sequential runs
that differ only in tensor shapes are from each other (issue 36's "exact within float32 tolerance").

Batched turns (``federation.batch_clients``) compute the same function as sequential turns but with
other tensor shapes: the frozen base layers see K clients' rows at once and the LoRA factors are
applied by a batched matmul. Float32 results then differ by rounding. SGD passes that rounding on
as it is; AdamW divides each gradient component by its own running norm, so a component whose
gradient is itself near rounding level can move by up to about ``lr`` either way. This script
measures both, on one client's DPO turn (SmolLM2-135M-Instruct by default, random token ids,
full-length rows), for AdamW and SGD, from the same start state and the same batches:

* ``batched``: the K clients trained together (the engine's :class:`~lightning_fed.batching.multi_lora.StackedLora`
  and per-client reduction, one optimizer over the stacked factors) against each one alone;
* ``rows x2``: each step's batch duplicated (two identical pairs: the same mean loss and gradient,
  twice the rows through every matmul) against the plain sequential turn;
* ``padded``: each step's rows right-padded by 16 masked tokens (the padding a group adds) against
  the plain sequential turn.

Printed: the largest absolute difference of any uploaded LoRA value, and the largest LoRA value.

    nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/batched_rounding.py --model smollm2
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from batched_clients import MODELS, GroupStep, build_module, client_batches  # noqa: E402

PAD = 16


def padded(batch: dict, pad_id: int) -> dict:
    """``batch`` with ``PAD`` masked tokens appended to every row (not attended, not scored)."""
    out = {}
    for name, t in batch.items():
        fill = 0 if name.endswith("attention_mask") else (-100 if name.endswith("labels") else pad_id)
        out[name] = torch.cat([t, torch.full((t.shape[0], PAD), fill, dtype=t.dtype)], dim=1)
    return out


def doubled(batch: dict) -> dict:
    return {name: torch.cat([t, t]) for name, t in batch.items()}


def sequential(module, start: dict, batches: list[dict], optimizer: str, lr: float) -> dict:
    """One client's turn alone: ``start`` loaded, a fresh optimizer, one step per batch."""
    params = module.shared_parameters()
    module.load_state(start)
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.AdamW)(list(params.values()), lr=lr)
    for batch in batches:
        loss = module.pair_metrics(batch)["loss"].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {n: p.detach().clone() for n, p in params.items()}


def batched(module, start: dict, turns: list[list[dict]], optimizer: str, lr: float) -> list[dict]:
    """The clients of ``turns`` trained together through the engine, each from ``start``."""
    module.load_state(start)
    group = GroupStep(module, "dpo", len(turns), turns[0][0]["chosen_input_ids"].shape[0])
    group.optimizer = (torch.optim.SGD if optimizer == "sgd" else torch.optim.AdamW)(
        list(module.shared_parameters().values()), lr=lr
    )
    for step in range(len(turns[0])):
        group.step([turn[step] for turn in turns])
    out = [{n: v.detach().clone() for n, v in group.stacked.views(k).items()} for k in range(len(turns))]
    group.close()
    return out


def largest_difference(a: list[dict], b: list[dict]) -> float:
    return max((x[n] - y[n]).abs().max().item() for x, y in zip(a, b) for n in x)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    module = build_module(args.model, "dpo")
    _, _, batch, length = MODELS[args.model]
    turns = client_batches(module, "dpo", args.clients, args.steps, batch, length)
    pad_id = module.tokenizer.pad_token_id or 0
    # LoRA's B starts at zero; give it the values of a few rounds so every factor has a gradient.
    gen = torch.Generator().manual_seed(1)
    start = {n: p.detach() + 1e-3 * torch.randn(p.shape, generator=gen) for n, p in module.shared_parameters().items()}
    print(f"model {args.model}, {args.clients} clients x {args.steps} DPO steps of {batch} pair(s) x {length} tokens")
    print(f"{'optimizer':>9} {'batched':>10} {'rows x2':>10} {'padded':>10} {'largest value':>14}")
    for optimizer in ("adamw", "sgd"):
        alone = [sequential(module, start, turn, optimizer, args.lr) for turn in turns]
        twice = [sequential(module, start, [doubled(b) for b in turn], optimizer, args.lr) for turn in turns]
        pad = [sequential(module, start, [padded(b, pad_id) for b in turn], optimizer, args.lr) for turn in turns]
        together = batched(module, start, turns, optimizer, args.lr)
        largest = max(v.abs().max().item() for state in alone for v in state.values())
        print(
            f"{optimizer:>9} {largest_difference(together, alone):>10.2e} {largest_difference(twice, alone):>10.2e}"
            f" {largest_difference(pad, alone):>10.2e} {largest:>14.2e}"
        )


if __name__ == "__main__":
    main()
