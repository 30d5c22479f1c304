"""Selector data (FedBis, FedBiscuit): preference records as A/B choice prompts.

Each record ``(prompt, chosen, rejected)`` becomes one item holding the pair in both orders:
``ab_*`` (chosen as A) and ``ba_*`` (chosen as B), with ``label`` the index of the preferred
response in order AB. The stored order is drawn per record, so A is not always the
preferred one even in ``ab``. The prompts are the paper's Figure 4 templates.

``template: chat`` sends the ``shp`` wording as the user turn of the tokenizer's chat
template (``chat:tldr`` or ``chat:short`` another wording); the answer letter is then the
first token of the assistant turn.
"""

from __future__ import annotations

import zlib
from typing import Any

from lightning_fed.datamodules.federated import FederatedDataModule
from lightning_fed.datamodules.templates import CHAT, format_prompt
from lightning_fed.datamodules.tokenize import Overflow, encode_prompt

# Figure 4 (SHP selector prompt), and a short form for byte-level tiny models in tests.
SELECTOR_TEMPLATES = {
    "shp": (
        "Below is a query followed by two responses. Pick a helpful response that is precise, "
        'concise, and casual. State your choice with a single capital letter, i.e., "A" if '
        'RESPONSE A is better, "B" if RESPONSE B is better.\n\n'
        "### QUERY: {query}\n### RESPONSE A: {a}\n### RESPONSE B: {b}\n### YOUR CHOICE:"
    ),
    "tldr": (
        "Below is a forum post followed by two summaries. Pick a more precise and concise one "
        "that summarizes the most important points in the given forum post, without including "
        "unimportant or irrelevant details. State your choice with a single capital letter, "
        'i.e., "A" if SUMMARY A is better, "B" if SUMMARY B is better.\n\n'
        "### POST: {query}\n### SUMMARY A: {a}\n### SUMMARY B: {b}\n### YOUR CHOICE:"
    ),
    "short": "Q: {query}\nA: {a}\nB: {b}\nYOUR CHOICE:",
}


SELECTOR_TEMPLATE_CHOICES = (*SELECTOR_TEMPLATES, CHAT, *(f"{CHAT}:{name}" for name in SELECTOR_TEMPLATES))


def selector_prompt(
    template: str, query: str, a: str, b: str, tokenizer: Any = None, system_prompt: str | None = None
) -> str:
    """The selector prompt for ``query`` with responses ``a`` and ``b``.

    ``chat`` and ``chat:<wording>`` need the ``tokenizer`` (its chat template).
    """
    if template not in SELECTOR_TEMPLATE_CHOICES:
        raise ValueError(f"data.template must be one of {list(SELECTOR_TEMPLATE_CHOICES)}, got {template!r}")
    if template.startswith(CHAT):
        wording = template[len(CHAT) + 1 :] or "shp"
        text = SELECTOR_TEMPLATES[wording].format(query=query, a=a, b=b)
        return format_prompt(CHAT, text, "", tokenizer, system_prompt)
    return SELECTOR_TEMPLATES[template].format(query=query, a=a, b=b)


def encode_choice_pair(
    template: str,
    query: str,
    first: str,
    second: str,
    tokenizer: Any,
    max_length: int,
    system_prompt: str | None = None,
) -> dict[str, list[int]]:
    """``ab_input_ids`` (``first`` as A) and ``ba_input_ids`` (``first`` as B)."""
    out = {}
    for order, (a, b) in (("ab", (first, second)), ("ba", (second, first))):
        ids = encode_prompt(tokenizer, selector_prompt(template, query, a, b, tokenizer, system_prompt))
        if len(ids) > max_length:
            raise Overflow(f"{len(ids)} tokens > max_length={max_length}")
        out[f"{order}_input_ids"] = ids
    return out


class SelectorDataModule(FederatedDataModule):
    """Federated preference pairs served as binary-selector prompts (both orders per item)."""

    kind = "preference"
    default_template = "shp"

    def __init__(self, dataset: str = "synthetic:preferences", **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)

    @classmethod
    def template_choices(cls) -> tuple[str, ...]:
        return SELECTOR_TEMPLATE_CHOICES

    def encode(self, record: dict[str, Any]) -> dict[str, Any]:
        # A stable per-record coin decides which response is stored first.
        key = "\x00".join((record["prompt"], record["chosen"], record["rejected"])).encode()
        swap = zlib.crc32(key) % 2 == 1
        first, second = (record["rejected"], record["chosen"]) if swap else (record["chosen"], record["rejected"])
        item: dict[str, Any] = encode_choice_pair(
            self.template, record["prompt"], first, second, self.tokenizer, self.max_length, self.system_prompt
        )
        item["label"] = int(swap)
        return item
