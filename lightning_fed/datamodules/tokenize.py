"""Tokenisation of instruction and preference records, and the padding collator.

Responses are scored, prompts are not: prompt positions carry ``IGNORE_INDEX`` labels.
Examples longer than ``max_length`` are handled per ``on_overflow`` (``error`` names the
row and client; ``truncate`` cuts them as ``truncation`` says; ``drop`` leaves them out).

Truncation policies (:data:`TRUNCATION_CHOICES`), each keeping at least one prompt token:

* ``prompt_left``: drop the prompt's first tokens, keeping its end next to the response
  (the end of the input and the template's response header). Loses a long instruction's
  task definition.
* ``prompt_middle``: drop tokens from the middle of the prompt, keeping its head (system
  prompt, chat header, the instruction's task definition) and its tail (the end of the
  input and the response header), half of the prompt's budget each.
* ``response``: keep the whole prompt and cut the response's end (when the prompt alone
  leaves no room for a response token, cut the prompt as ``prompt_middle`` first).

With ``prompt_left`` and ``prompt_middle`` the response keeps priority: the prompt is cut
first and the response only if the prompt's budget would fall under one token.

Separate budgets, as TRL's ``max_prompt_length`` / ``max_completion_length``, come first:
the prompt keeps its end (``prompt_left``; ``prompt_middle`` keeps head and tail) within
``max_prompt_length``, the response its start within ``max_completion_length``; the policy
above then fits what is left into ``max_length``. A prompt that was cut keeps at least
``min_prompt_length`` tokens (or all of them when it is shorter); an example that cannot is
refused with :class:`PromptTooShort` (the data module drops and counts it), so no example is
trained or scored without its question. ``on_prompt_loss`` is called for an example that
kept less than half of its prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from lightning_fed.option_rules import TRUNCATION_CHOICES  # declared once, torch-free

IGNORE_INDEX = -100
"""Label of an unscored position: torch's ``cross_entropy`` default ``ignore_index`` (the same
value as :data:`lightning_fed.modules.losses.IGNORE_INDEX`; the data package does not import
the modules package)."""


class Overflow(ValueError):
    """An example does not fit ``max_length``."""


class PromptTooShort(Overflow):
    """Fitting an example would leave fewer than ``min_prompt_length`` of its prompt tokens."""


def _cut_prompt(prompt: list[int], keep: int, truncation: str) -> list[int]:
    if keep >= len(prompt):
        return prompt
    if truncation == "prompt_left":
        return prompt[len(prompt) - keep :]
    head = (keep + 1) // 2  # prompt_middle (and response's fallback)
    return prompt[:head] + prompt[len(prompt) - (keep - head) :]


def _fit(
    prompt: list[int],
    response: list[int],
    max_length: int,
    on_overflow: str,
    truncation: str = "prompt_left",
    on_truncate: Callable[[], None] | None = None,
    *,
    max_prompt_length: int | None = None,
    max_completion_length: int | None = None,
    min_prompt_length: int = 1,
    on_prompt_loss: Callable[[], None] | None = None,
) -> tuple[list[int], list[int]]:
    if truncation not in TRUNCATION_CHOICES:
        raise ValueError(f"`data.truncation` must be one of {TRUNCATION_CHOICES}, got {truncation!r}")
    original = len(prompt)
    cut = False
    if max_prompt_length is not None and len(prompt) > max_prompt_length:  # TRL max_prompt_length: keep the end
        prompt = _cut_prompt(
            prompt, max_prompt_length, "prompt_middle" if truncation == "prompt_middle" else "prompt_left"
        )
        cut = True
    if max_completion_length is not None and len(response) > max_completion_length:  # keep the start
        response, cut = response[:max_completion_length], True
    total = len(prompt) + len(response)
    if total > max_length:
        if on_overflow != "truncate":
            raise Overflow(
                f"{total} tokens (prompt {len(prompt)} + response {len(response)}) > max_length={max_length}"
            )
        cut = True
        if truncation == "response":
            prompt = _cut_prompt(prompt, max(1, max_length - 1), "prompt_middle")
        else:
            prompt = _cut_prompt(prompt, max(1, max_length - len(response)), truncation)
        response = response[: max_length - len(prompt)]
    if len(prompt) < min(min_prompt_length, original):
        raise PromptTooShort(
            f"only {len(prompt)} of its {original} prompt tokens fit (data.min_prompt_length={min_prompt_length})"
        )
    if cut and on_truncate is not None:
        on_truncate()
    if 2 * len(prompt) < original and on_prompt_loss is not None:
        on_prompt_loss()
    return prompt, response


def _pair(prompt: list[int], response: list[int]) -> tuple[list[int], list[int]]:
    return prompt + response, [IGNORE_INDEX] * len(prompt) + response


def encode_response(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a response followed by the end-of-sequence token.

    The eos token is not appended twice when the text already ends with it (a chat
    template whose end-of-turn marker is the eos token, as SmolLM2's ``<|im_end|>``).
    """
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids if ids and ids[-1] == tokenizer.eos_token_id else ids + [tokenizer.eos_token_id]


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a prompt, with the tokenizer's own leading special tokens (e.g. BOS).

    A prompt that already starts with the BOS text (rendered by a chat template) gets no
    second one.
    """
    bos = getattr(tokenizer, "bos_token", None)
    return tokenizer(text, add_special_tokens=not (bos and text.startswith(bos)))["input_ids"]


def tokenize_sft(
    prompt: str,
    response: str,
    tokenizer: Any,
    max_length: int,
    on_overflow: str,
    truncation: str = "prompt_left",
    on_truncate: Callable[[], None] | None = None,
    **budget: Any,
) -> dict[str, list[int]]:
    """``input_ids`` and ``labels`` (prompt masked) of one instruction example.

    ``response`` is the text that follows the prompt (see
    :func:`~lightning_fed.datamodules.templates.format_response`); ``on_truncate`` is called
    once if the example had to be truncated. ``budget``: ``max_prompt_length``,
    ``max_completion_length``, ``min_prompt_length``, ``on_prompt_loss`` (module docstring).
    """
    p, r = _fit(
        encode_prompt(tokenizer, prompt),
        encode_response(tokenizer, response),
        max_length,
        on_overflow,
        truncation,
        on_truncate,
        **budget,
    )
    ids, labels = _pair(p, r)
    return {"input_ids": ids, "labels": labels}


def tokenize_preference(
    prompt: str,
    chosen: str,
    rejected: str,
    tokenizer: Any,
    max_length: int,
    on_overflow: str,
    truncation: str = "prompt_left",
    on_truncate: Callable[[], None] | None = None,
    **budget: Any,
) -> dict[str, list[int]]:
    """Chosen and rejected sequences of one preference pair, sharing the same prompt tokens.

    ``on_truncate`` is called once if either sequence had to be truncated, ``on_prompt_loss``
    (in ``budget``, with the other budgets of :func:`tokenize_sft`) once if either kept less
    than half of the prompt; the pair is refused (:class:`PromptTooShort`) if either would.
    """
    p = encode_prompt(tokenizer, prompt)
    on_prompt_loss = budget.pop("on_prompt_loss", None)
    out: dict[str, list[int]] = {}
    cut: list[str] = []
    lost: list[str] = []
    for name, text in (("chosen", chosen), ("rejected", rejected)):
        pp, r = _fit(
            p,
            encode_response(tokenizer, text),
            max_length,
            on_overflow,
            truncation,
            partial(cut.append, name),
            on_prompt_loss=partial(lost.append, name),
            **budget,
        )
        out[f"{name}_input_ids"], out[f"{name}_labels"] = _pair(pp, r)
    if cut and on_truncate is not None:
        on_truncate()
    if lost and on_prompt_loss is not None:
        on_prompt_loss()
    return out


@dataclass
class PadCollator:
    """Right-pads every ``*input_ids`` key with ``pad_id`` and every ``*labels`` key with -100.

    Keys sharing a prefix (``chosen_``/``rejected_``) are padded to one common length so a
    DPO module can concatenate them in one forward. Integer fields (``client_id``) are stacked.
    """

    pad_id: int

    def __call__(self, items: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        seq_keys = [k for k in items[0] if k.endswith("input_ids") or k.endswith("labels")]
        width = max(len(item[k]) for item in items for k in seq_keys)
        batch: dict[str, torch.Tensor] = {}
        for key in seq_keys:
            fill = self.pad_id if key.endswith("input_ids") else IGNORE_INDEX
            rows = [item[key] + [fill] * (width - len(item[key])) for item in items]
            batch[key] = torch.tensor(rows, dtype=torch.long)
            if key.endswith("input_ids"):
                lengths = torch.tensor([len(item[key]) for item in items])
                mask_key = key[: -len("input_ids")] + "attention_mask"
                batch[mask_key] = (torch.arange(width)[None, :] < lengths[:, None]).long()
        for key in items[0]:
            if key not in seq_keys:
                batch[key] = torch.tensor([item[key] for item in items])
        return batch
