"""Greedy generation of responses with the current (adapter-applied) model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


@torch.no_grad()
def generate_responses(
    model: torch.nn.Module, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int = 64, batch_size: int = 16
) -> list[str]:
    """Greedy continuations of ``prompts`` (``model.generate``, no sampling, one beam).

    Prompts are encoded like training prompts (with the tokenizer's leading special tokens)
    and batched by equal token length, so no padding enters the model. Generation stops at
    the eos token or after ``max_new_tokens``; the returned texts hold the new tokens only,
    special tokens dropped. The model's train/eval mode is restored afterwards.

    Args:
        model: A causal LM (PEFT-wrapped or not).
        tokenizer: Its tokenizer (with an eos token).
        prompts: Prompt texts, already formatted with the data's template.
        max_new_tokens: Most tokens generated per prompt.
        batch_size: Prompts per ``generate`` call.
    """
    from lightning_fed.datamodules.tokenize import encode_prompt

    if max_new_tokens < 1:
        raise ValueError(f"`max_new_tokens` must be >= 1, got {max_new_tokens}")
    return generate_from_ids(
        model, tokenizer, [encode_prompt(tokenizer, p) for p in prompts], max_new_tokens, batch_size
    )


@torch.no_grad()
def generate_from_ids(
    model: torch.nn.Module, tokenizer: Any, encoded: Sequence[Sequence[int]], max_new_tokens: int, batch_size: int = 16
) -> list[str]:
    """Greedy continuations of already tokenized prompts, batched by equal length (no padding).

    Args:
        model: A causal LM (PEFT-wrapped or not); its train/eval mode is restored afterwards.
        tokenizer: Its tokenizer (eos and pad token ids, decoding).
        encoded: Token ids of each prompt.
        max_new_tokens: Most tokens generated per prompt.
        batch_size: Prompts per ``generate`` call.
    """
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(encoded):
        by_length.setdefault(len(ids), []).append(i)
    out = [""] * len(encoded)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        for length, rows in sorted(by_length.items()):
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                ids = torch.tensor([list(encoded[i]) for i in chunk], device=device)
                gen = model.generate(
                    input_ids=ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    num_beams=1,
                    eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id,
                )
                for row, i in enumerate(chunk):
                    out[i] = tokenizer.decode(gen[row, length:].tolist(), skip_special_tokens=True)
    finally:
        model.train(was_training)
    return out
