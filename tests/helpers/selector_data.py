"""Planted selector data that a 2-layer byte-level GPT-2 learns through LoRA in ~150 steps.

``planted_preferences`` differs in one word per pair, which a random tiny model does not pick
up in a test's budget. Here a response is two sentiment words and two register words, and
a group prefers one side of one property over the whole response:

* ``positive``: positive over negative sentiment words (same register words in both);
* ``negative``: the reverse, in conflict with ``positive``;
* ``formal``: formal over casual register words (same sentiment words in both).

Client ``k`` belongs to ``groups[k % len(groups)]``, as in ``planted_preferences``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

POS = ("good", "nice", "great", "fine", "happy")
NEG = ("bad", "awful", "poor", "sad", "ugly")
FORMAL = ("sir", "madam", "kindly", "regards")
CASUAL = ("dude", "bro", "yo", "mate")


def planted_selector_rows(
    num_clients: int, per_client: int, groups=("positive", "negative", "formal"), seed: int = 0
) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for c in range(num_clients):
        group = groups[c % len(groups)]
        for i in range(per_client):
            pos, neg = rng.choices(POS, k=2), rng.choices(NEG, k=2)
            formal, casual = rng.choices(FORMAL, k=2), rng.choices(CASUAL, k=2)
            if group == "formal":
                senti = pos if rng.random() < 0.5 else neg
                chosen, rejected = senti + formal, senti + casual
            else:
                reg = formal if rng.random() < 0.5 else casual
                chosen, rejected = pos + reg, neg + reg
                if group == "negative":
                    chosen, rejected = rejected, chosen
            rows.append(
                {
                    "prompt": f"q{c}-{i}",
                    "chosen": " ".join(chosen),
                    "rejected": " ".join(rejected),
                    "client": c,
                    "group": group,
                }
            )
    return rows


def write_planted_selector_data(path: Path, num_clients: int, per_client: int, **kwargs) -> str:
    with open(path, "w") as f:
        for row in planted_selector_rows(num_clients, per_client, **kwargs):
            f.write(json.dumps(row) + "\n")
    return str(path)


def one_thread():
    """Context for a training test: one intra-op thread (2 shared cores: 2 threads thrash)."""
    import contextlib

    import torch

    @contextlib.contextmanager
    def ctx():
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(n)

    return ctx()
