"""Planted instruction families: deterministic text transformations shared across clients.

:func:`planted_instructions` gives instruction/output rows from a few families per client
(see :data:`INSTRUCTION_FAMILIES`); the answer is known by construction, so tests can check
that instruction tuning learns. Registered as ``synthetic:instructions`` in
:mod:`~lightning_fed.datamodules.synthetic`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import datasets
import numpy as np

WORDS = (
    "apple",
    "river",
    "stone",
    "cloud",
    "tiger",
    "bread",
    "light",
    "green",
    "music",
    "ocean",
    "paper",
    "chair",
    "smile",
    "dream",
    "house",
    "plant",
    "train",
    "water",
    "sugar",
    "lemon",
    "horse",
    "candle",
    "pencil",
    "garden",
    "forest",
    "silver",
    "winter",
    "summer",
    "rocket",
    "planet",
    "violin",
    "window",
    "bottle",
    "basket",
    "castle",
    "mirror",
    "tomato",
    "button",
    "puzzle",
    "rabbit",
)


def _words(text: str) -> list[str]:
    return text.split()


# family name -> (fixed instruction wording, transformation of the input text)
INSTRUCTION_FAMILIES: dict[str, tuple[str, Callable[[str], str]]] = {
    "reverse_words": ("Reverse the order of the words.", lambda t: " ".join(reversed(_words(t)))),
    "uppercase": ("Rewrite the words in uppercase.", str.upper),
    "last_word": ("Copy the last word.", lambda t: _words(t)[-1]),
    "sort_words": ("Sort the words alphabetically.", lambda t: " ".join(sorted(_words(t)))),
    "count_words": ("Count the words.", lambda t: str(len(_words(t)))),
    "repeat_first": ("Repeat the first word twice.", lambda t: f"{_words(t)[0]} {_words(t)[0]}"),
    "replace_vowels": ("Replace every vowel with *.", lambda t: re.sub("[aeiou]", "*", t)),
    "first_letters": ("Write the first letter of each word.", lambda t: "".join(w[0] for w in _words(t))),
    "capitalize": ("Capitalize each word.", lambda t: " ".join(w.capitalize() for w in _words(t))),
    "drop_first": ("Remove the first word.", lambda t: " ".join(_words(t)[1:])),
}


def apply_family(family: str, text: str) -> str:
    """The correct output of instruction family ``family`` on input ``text``."""
    if family not in INSTRUCTION_FAMILIES:
        raise ValueError(f"unknown instruction family {family!r}; valid: {list(INSTRUCTION_FAMILIES)}")
    return INSTRUCTION_FAMILIES[family][1](text)


def client_families(num_clients: int, families: Sequence[str], families_per_client: int) -> list[list[str]]:
    """Families of each client: client ``k`` gets ``families[(k * f + j) % F]``, ``j < f``.

    Consecutive clients take consecutive blocks of the family list, wrapping around, so every
    family is shared by several clients once ``num_clients * f > F``.
    """
    count = len(families)
    return [
        [families[(k * families_per_client + j) % count] for j in range(families_per_client)]
        for k in range(num_clients)
    ]


def planted_instructions(
    num_clients: int = 8,
    examples_per_client: int = 64,
    families: Sequence[str] | None = None,
    families_per_client: int = 2,
    seed: int = 0,
    held_out_families: Sequence[str] = (),
) -> datasets.Dataset:
    """Instruction-following rows from a few deterministic text transformations per client.

    Each row's input is 3-5 distinct words from a small vocabulary; the instruction is the
    family's fixed wording and the output its transformation of the input (see
    :data:`INSTRUCTION_FAMILIES`). Client families are assigned by :func:`client_families`
    over ``families`` minus ``held_out_families``, and each client's rows cycle through its
    families in a shuffled order.

    Args:
        num_clients: Number of clients.
        examples_per_client: Rows per client.
        families: Family names to use, in assignment order; ``None`` for all of
            :data:`INSTRUCTION_FAMILIES`.
        families_per_client: Families per client.
        seed: Seed of the random draws.
        held_out_families: Families no client gets (e.g. to evaluate on them separately
            with ``families=held_out_families``).

    Returns:
        Columns ``instruction``, ``input``, ``output``, ``client`` (int), ``family`` (str),
        rows ordered by client.

    Raises:
        ValueError: On an unknown family name, no family left, or a bad size.
    """
    check_positive("planted_instructions", num_clients=num_clients)
    check_positive("planted_instructions", examples_per_client=examples_per_client)
    families = (
        list(INSTRUCTION_FAMILIES)
        if families is None
        else ([families] if isinstance(families, str) else list(families))
    )
    held_out = [held_out_families] if isinstance(held_out_families, str) else list(held_out_families)
    for name in families + held_out:
        if name not in INSTRUCTION_FAMILIES:
            raise ValueError(f"planted_instructions: unknown family {name!r}; valid: {list(INSTRUCTION_FAMILIES)}")
    active = [name for name in families if name not in held_out]
    if not active:
        raise ValueError(f"planted_instructions: no family left after holding out {held_out}; families: {families}")
    if not 1 <= families_per_client <= len(active):
        raise ValueError(
            f"planted_instructions: `families_per_client` must be in [1, {len(active)}] "
            f"(the number of families in use), got {families_per_client}"
        )

    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {"instruction": [], "input": [], "output": [], "client": [], "family": []}
    for client, names in enumerate(client_families(num_clients, active, families_per_client)):
        order = np.resize(np.arange(len(names)), examples_per_client)
        rng.shuffle(order)
        for j in order:
            family = names[j]
            size = int(rng.integers(3, 6))
            text = " ".join(WORDS[w] for w in rng.choice(len(WORDS), size=size, replace=False))
            rows["instruction"].append(INSTRUCTION_FAMILIES[family][0])
            rows["input"].append(text)
            rows["output"].append(apply_family(family, text))
            rows["client"].append(client)
            rows["family"].append(family)
    return datasets.Dataset.from_dict(rows)


def check_positive(where: str, **value: int) -> None:
    """Raise a one-line error naming ``where`` and the argument unless it is a positive integer."""
    ((name, number),) = value.items()
    if not isinstance(number, (int, np.integer)) or number < 1:
        raise ValueError(f"{where}: `{name}` must be a positive integer, got {number!r}")
