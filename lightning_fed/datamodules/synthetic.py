"""Built-in federated data sets with planted, learnable per-client structure.

They let a test check that a method *learns*: the answer is known by construction.

* :func:`planted_preferences`: preference pairs whose chosen and rejected responses are the
  same text except for one surface property (a sentiment word, or the sign-off's register).
  Each client belongs to a group that prefers one side of one property; opposite groups
  disagree on the same kind of prompts, which is what non-IID preference methods
  (FedPDPO, FedBiscuit) must untangle.
* :func:`~lightning_fed.datamodules.synthetic_instructions.planted_instructions` (its own
  module): instruction/output pairs from simple, deterministic text transformations
  ("families"), a few per client, shared across clients.

Texts are short (prompts and responses under 60 characters) so byte-level tokenisation
fits in ~128 tokens, and the planted vocabularies are small so a tiny model learns them
in a few hundred steps; the prompts vary enough that held-out rows test generalisation.
Every function is deterministic given ``seed`` and returns a :class:`datasets.Dataset`
with an integer ``client`` column.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import datasets
import numpy as np

from lightning_fed.datamodules.synthetic_instructions import (  # noqa: F401  (re-exported)
    INSTRUCTION_FAMILIES,
    WORDS,
    apply_family,
    check_positive,
    client_families,
    planted_instructions,
)

# ---------------------------------------------------------------------------------------
# Preferences
# ---------------------------------------------------------------------------------------

SUBJECTS = (
    "movie",
    "book",
    "hotel",
    "meal",
    "concert",
    "game",
    "phone",
    "laptop",
    "museum",
    "park",
    "song",
    "album",
    "show",
    "trip",
    "cafe",
    "class",
    "lecture",
    "podcast",
    "novel",
    "play",
    "beach",
    "train ride",
    "pizza",
    "coffee",
    "garden",
    "festival",
    "camera",
    "jacket",
    "bike",
    "tour",
)

PROMPT_TEMPLATES = (
    "What did you think of the {subject}?",
    "How was the {subject}?",
    "Give me your opinion on the {subject}.",
    "Review the {subject} in one line.",
    "Describe the {subject} briefly.",
    "Tell me about the {subject}.",
    "Was the {subject} any good?",
    "Sum up the {subject} for a friend.",
    "Write a short note about the {subject}.",
    "How would you rate the {subject}?",
    "Any thoughts on the {subject}?",
    "Share a quick take on the {subject}.",
    "What is your verdict on the {subject}?",
    "Comment on the {subject}.",
    "Reply to a question about the {subject}.",
    "Write one sentence on the {subject}.",
    "How did you find the {subject}?",
    "Should I try the {subject}?",
    "Give feedback on the {subject}.",
    "Summarise your view of the {subject}.",
    "Describe your experience with the {subject}.",
    "What is the {subject} like?",
    "Write a quick review of the {subject}.",
    "Tell a friend about the {subject}.",
)

RESPONSE_TEMPLATES = (
    "The {subject} was {word}.",
    "I found the {subject} {word}.",
    "It was {word}, honestly.",
    "My take: {word}.",
    "Overall the {subject} felt {word}.",
    "In short, {word}.",
    "The {subject} is {word}.",
    "Truly {word}.",
)

# Each planted property is a small vocabulary of (side 0, side 1) pairs of equal length in
# characters, so chosen and rejected have the same length and a random model scores them
# about 50/50.
SENTIMENT_WORDS = (
    ("good", "poor"),
    ("great", "awful"),
    ("superb", "horrid"),
    ("lovely", "boring"),
    ("brilliant", "miserable"),
)
SIGN_OFFS = (
    ("Kind regards.", "See ya later!"),
    ("Yours truly.", "Cheers, mate"),
    ("Sincerely.", "Later, bro"),
    ("Regards.", "Cheers!!"),
)

# group name -> (planted property, preferred side of that property's pairs)
PREFERENCE_GROUPS: dict[str, tuple[str, int]] = {
    "positive": ("sentiment", 0),
    "negative": ("sentiment", 1),
    "formal": ("sign_off", 0),
    "casual": ("sign_off", 1),
}


def _template_draws(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """The template draws of ``n`` preference pairs, in this order (both generators' streams
    start with them): prompt, subject, body, sentiment word, sign-off, and the ``background`` side
    of the property that is *not* planted (shared by chosen and rejected)."""
    return {
        "prompt": rng.integers(len(PROMPT_TEMPLATES), size=n),
        "subject": rng.integers(len(SUBJECTS), size=n),
        "body": rng.integers(len(RESPONSE_TEMPLATES), size=n),
        "sentiment": rng.integers(len(SENTIMENT_WORDS), size=n),
        "sign_off": rng.integers(len(SIGN_OFFS), size=n),
        "background": rng.integers(2, size=n),
    }


def planted_preferences(
    num_clients: int = 8,
    examples_per_client: int = 64,
    groups: Sequence[str] = ("positive", "negative"),
    seed: int = 0,
) -> datasets.Dataset:
    """Preference pairs whose preferred side of one surface property depends on the client.

    A response is ``"<body with a sentiment word> <sign-off>"``. For a client of group
    ``"positive"`` the chosen response has the positive word and the rejected one the
    negative word of the same pair (same length), with the same sign-off; ``"negative"``
    swaps them. ``"formal"``/``"casual"`` vary the sign-off instead and keep the sentiment
    word. The non-planted property is drawn at random and shared by both responses, so it
    carries no signal. Clients are assigned to groups round-robin: client ``k`` belongs to
    ``groups[k % len(groups)]``.

    The random draws do not depend on the groups, so the same ``seed`` with group
    ``"positive"`` and with ``"negative"`` gives the same rows with chosen and rejected
    swapped.

    Args:
        num_clients: Number of clients.
        examples_per_client: Rows per client.
        groups: Group names, one of :data:`PREFERENCE_GROUPS` each.
        seed: Seed of the random draws.

    Returns:
        Columns ``prompt``, ``chosen``, ``rejected``, ``client`` (int), ``group`` (str),
        rows ordered by client.

    Raises:
        ValueError: On an unknown group name or a non-positive size.
    """
    check_positive("planted_preferences", num_clients=num_clients)
    check_positive("planted_preferences", examples_per_client=examples_per_client)
    groups = [groups] if isinstance(groups, str) else list(groups)
    if not groups:
        raise ValueError(f"planted_preferences: `groups` is empty; choose from {sorted(PREFERENCE_GROUPS)}")
    for group in groups:
        if group not in PREFERENCE_GROUPS:
            raise ValueError(f"planted_preferences: unknown group {group!r}; valid: {sorted(PREFERENCE_GROUPS)}")

    n = num_clients * examples_per_client
    rng = np.random.default_rng(seed)
    draws = _template_draws(rng, n)
    rows: dict[str, list] = {"prompt": [], "chosen": [], "rejected": [], "client": [], "group": []}
    for i in range(n):
        client = i // examples_per_client
        group = groups[client % len(groups)]
        prop, side = PREFERENCE_GROUPS[group]
        subject = SUBJECTS[draws["subject"][i]]
        body = RESPONSE_TEMPLATES[draws["body"][i]]
        words = SENTIMENT_WORDS[draws["sentiment"][i]]
        sign_offs = SIGN_OFFS[draws["sign_off"][i]]
        background = int(draws["background"][i])
        # the planted property takes the given side; the other one the shared background side
        sides = {"sentiment": background, "sign_off": background}
        responses = []
        for s in (side, 1 - side):
            sides[prop] = s
            word, sign_off = words[sides["sentiment"]], sign_offs[sides["sign_off"]]
            responses.append(body.format(subject=subject, word=word) + " " + sign_off)
        rows["prompt"].append(PROMPT_TEMPLATES[draws["prompt"][i]].format(subject=subject))
        rows["chosen"].append(responses[0])
        rows["rejected"].append(responses[1])
        rows["client"].append(client)
        rows["group"].append(group)
    return datasets.Dataset.from_dict(rows)


def planted_hard_preferences(
    num_clients: int = 8,
    examples_per_client: int = 64,
    groups: Sequence[str] = ("positive", "negative"),
    seed: int = 0,
    label_noise: float = 0.0,
    distractor: float = 0.0,
    purity: float = 1.0,
) -> datasets.Dataset:
    """A harder variant of :func:`planted_preferences`, where a per-client head does not saturate.

    The rows are built as in :func:`planted_preferences` (a response is ``"<body with a
    sentiment word> <sign-off>"``; the planted property takes the preferred side in the
    chosen response), with three knobs that make the per-client preference subtler:

    * ``distractor``: with this probability a row's *non-planted* property also differs
      between chosen and rejected, on a random side (independent of the preference). The
      model must learn which difference matters to this client and be indifferent to the
      other; a random model's ``log p`` difference then carries a second, irrelevant term.
    * ``purity``: each row follows its client's group with this probability and the
      opposite side of the same property otherwise, so clients are mixtures (heterogeneous
      but not disjoint); ``0.5`` makes a client's preference pure noise.
    * ``label_noise``: with this probability chosen and rejected are swapped after the
      above (annotator noise; it bounds the attainable accuracy at ``1 - label_noise``).

    All draws come from one generator seeded by ``seed``; with the three knobs at 0, 0, 1
    the rows have the same structure as :func:`planted_preferences` (not the same draws).

    Args:
        num_clients: Number of clients.
        examples_per_client: Rows per client.
        groups: Group names, one of :data:`PREFERENCE_GROUPS` each; client ``k`` belongs
            to ``groups[k % len(groups)]``.
        seed: Seed of the random draws.
        label_noise: Probability of swapping chosen and rejected, in ``[0, 0.5)``.
        distractor: Probability that the non-planted property also differs, in ``[0, 1]``.
        purity: Probability that a row follows its client's group, in ``(0.5, 1]``.

    Returns:
        Columns ``prompt``, ``chosen``, ``rejected``, ``client`` (int), ``group`` (str),
        ``follows_group`` (bool: the row's preferred side is its group's, before label
        noise) and ``flipped`` (bool: label noise swapped it), rows ordered by client.

    Raises:
        ValueError: On an unknown group name, a bad size or a knob out of range.
    """
    check_positive("planted_hard_preferences", num_clients=num_clients)
    check_positive("planted_hard_preferences", examples_per_client=examples_per_client)
    groups = [groups] if isinstance(groups, str) else list(groups)
    unknown = [g for g in groups if g not in PREFERENCE_GROUPS]
    problems = [f"unknown group {g!r}; valid: {sorted(PREFERENCE_GROUPS)}" for g in unknown]
    if not groups:
        problems.append(f"`groups` is empty; choose from {sorted(PREFERENCE_GROUPS)}")
    if not 0 <= label_noise < 0.5:
        problems.append(f"`label_noise` must be in [0, 0.5), got {label_noise}")
    if not 0 <= distractor <= 1:
        problems.append(f"`distractor` must be in [0, 1], got {distractor}")
    if not 0.5 < purity <= 1:
        problems.append(f"`purity` must be in (0.5, 1], got {purity}")
    if problems:
        raise ValueError("planted_hard_preferences: " + "; ".join(problems))

    n = num_clients * examples_per_client
    rng = np.random.default_rng(seed)
    draws = {
        **_template_draws(rng, n),
        "distract": rng.random(n) < distractor,
        "follows": rng.random(n) < purity,
        "flip": rng.random(n) < label_noise,
    }
    rows: dict[str, list] = {
        k: [] for k in ("prompt", "chosen", "rejected", "client", "group", "follows_group", "flipped")
    }
    for i in range(n):
        client = i // examples_per_client
        group = groups[client % len(groups)]
        prop, side = PREFERENCE_GROUPS[group]
        other = "sign_off" if prop == "sentiment" else "sentiment"
        if not draws["follows"][i]:
            side = 1 - side
        background = int(draws["background"][i])
        subject = SUBJECTS[draws["subject"][i]]
        body = RESPONSE_TEMPLATES[draws["body"][i]]
        words = SENTIMENT_WORDS[draws["sentiment"][i]]
        sign_offs = SIGN_OFFS[draws["sign_off"][i]]
        responses = []
        for k, s in enumerate((side, 1 - side)):
            # the distractor flips the other property in the rejected response only
            sides = {prop: s, other: background if k == 0 or not draws["distract"][i] else 1 - background}
            word, sign_off = words[sides["sentiment"]], sign_offs[sides["sign_off"]]
            responses.append(body.format(subject=subject, word=word) + " " + sign_off)
        if draws["flip"][i]:
            responses.reverse()
        rows["prompt"].append(PROMPT_TEMPLATES[draws["prompt"][i]].format(subject=subject))
        rows["chosen"].append(responses[0])
        rows["rejected"].append(responses[1])
        rows["client"].append(client)
        rows["group"].append(group)
        rows["follows_group"].append(bool(draws["follows"][i]))
        rows["flipped"].append(bool(draws["flip"][i]))
    return datasets.Dataset.from_dict(rows)


SYNTHETIC: dict[str, Callable[..., datasets.Dataset]] = {
    "preferences": planted_preferences,
    "instructions": planted_instructions,
    "hard_preferences": planted_hard_preferences,
}
