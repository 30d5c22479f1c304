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

Model: a tiny GPT-2 built from a config (2 layers, width 64, byte tokenizer, LoRA r=16 on
attention and MLP), not SmolLM2-135M: on this shared 2-core CPU one SmolLM2 FedIT round of ~40
clients would take over an hour per setting. Client-level DP: ``ClientLevelDP(FedAvg)`` with
``noise_multiplier`` calibrated by ``PrivacyConfig(target_epsilon, delta).plan`` and
``expected_clients = N``; ``--delta`` (1e-5) is used by both the accountant and the audit.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/privacy_audit.py --epsilons inf 8 2 --seeds 0
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


def build_federation(seed: int, canaries: int, fillers: int, repeats: int, filler_rows_per_client: int) -> dict:
    """The canaries (name, code, included) and the training rows of the included ones and the fillers."""
    rng = random.Random(1000 + seed)
    names = set()
    while len(names) < canaries:
        names.add("".join(rng.choice(LETTERS) for _ in range(4)))
    table = []
    for i, name in enumerate(sorted(names)):
        code = "".join(rng.choice("0123456789") for _ in range(DIGITS))
        table.append({"name": name, "code": code, "included": rng.random() < 0.5, "user": f"canary{i:03d}"})
    rows = []
    for c in table:
        if c["included"]:
            rows += [
                {"instruction": canary_prompt(c["name"]), "output": canary_answer(c["code"]), "user": c["user"]}
            ] * (repeats)
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
    z, acc = plan_privacy(epsilon, num_clients, args.rounds, args.delta)
    delta = args.delta
    pl.seed_everything(seed, verbose=False)
    module = SFTModule(
        BackboneConfig(config=dict(TINY), tokenizer="bytes"),
        lora=LoraSettings(r=args.rank, alpha=2 * args.rank, dropout=0.0, target_modules=list(LORA_TARGETS)),
        lr=args.lr,
    )
    data = InstructionDataModule(
        dataset=str(path),
        num_clients=num_clients,
        partition=ByKey(key="user"),
        template="plain",
        batch_size=args.batch_size,
        max_length=96,
        val_fraction=0.0,
    )
    strategy = FedAvg()
    if acc is not None:
        strategy = ClientLevelDP(
            FedAvg(), noise_multiplier=z, clip_norm=args.clip_norm, expected_clients=num_clients, seed=seed
        )
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


def audit(module, canaries: list[dict], n_candidates: int, seed: int) -> list[float]:
    """Exposure of every canary among ``n_candidates`` random codes in its own prompt."""
    rng = random.Random(2000 + seed)
    result = []
    for c in canaries:
        candidates = []
        while len(candidates) < n_candidates:
            code = "".join(rng.choice("0123456789") for _ in range(DIGITS))
            if code != c["code"]:
                candidates.append(code)
        nll = response_nll(module, canary_prompt(c["name"]), [canary_answer(x) for x in [c["code"], *candidates]])
        result.append(exposure(nll[0], nll[1:]))
    return result


def membership(canaries: list[dict], exposures: list[float], delta: float) -> dict:
    """Steinke et al.'s guesses: top m/4 by exposure "in", bottom m/4 "out" (ties by index), the bound."""
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
    parser.add_argument("--canaries", type=int, default=64)
    parser.add_argument("--fillers", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=8, help="copies of its canary in a canary client's data")
    parser.add_argument("--filler-rows", type=int, default=8)
    parser.add_argument("--candidates", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--local-steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument(
        "--delta",
        type=float,
        default=1e-5,
        help="delta of both the accountant and the audit (1/N^1.1 of a ~40-client federation makes Theorem 3's"
        " 2 m delta term exceed 1: no bound at all)",
    )
    parser.add_argument("--clip-norm", type=float, default=0.5)
    parser.add_argument("--out", default="runs/privacy_audit/results.jsonl")
    args = parser.parse_args()
    import statistics

    import torch

    torch.set_num_threads(1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        fed = build_federation(seed, args.canaries, args.fillers, args.repeats, args.filler_rows)
        for eps in args.epsilons:
            t0, c0 = time.perf_counter(), time.process_time()
            with tempfile.TemporaryDirectory() as tmp:
                module, plan = train(fed["rows"], seed, eps, args, Path(tmp))
            exp = audit(module, fed["canaries"], args.candidates, seed)
            mem = membership(fed["canaries"], exp, plan["delta"])
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
                **mem,
                "empirical_le_accountant": mem["eps_lower"] <= acc_eps,
                "seconds": time.perf_counter() - t0,
                "cpu_seconds": time.process_time() - c0,
                "args": {k: v for k, v in vars(args).items() if k not in ("epsilons", "seeds", "out")},
            }
            with open(args.out, "a") as fh:
                fh.write(json.dumps(record) + "\n")
            print(
                f"seed {seed} eps {eps}: z={plan['z']:.3f} accountant eps={acc_eps:.3f} delta={plan['delta']:.2e} "
                f"exposure in {record['exposure_in_mean']:.2f} (median {record['exposure_in_median']:.2f}) "
                f"out {record['exposure_out_mean']:.2f} (median {record['exposure_out_median']:.2f}) of "
                f"{record['exposure_max_bits']:.2f} bits; guesses {mem['v']}/{mem['r']} right of m={mem['m']}: "
                f"empirical eps >= {mem['eps_lower']:.3f}; "
                f"empirical <= accountant: {record['empirical_le_accountant']} "
                f"({record['seconds']:.0f}s, cpu {record['cpu_seconds']:.0f}s)",
                flush=True,
            )
            assert record["empirical_le_accountant"], "empirical epsilon above the accountant's: a privacy bug"


if __name__ == "__main__":
    main()
