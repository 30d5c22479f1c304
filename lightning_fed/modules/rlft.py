"""Server-side RLFT of the policy with binary selectors (Wu et al., 2024, arXiv:2407.03038,
Sec. 3.1 "Reinforcement-learning fine-tuning" and Sec. 3.2 for multiple selectors).

1. The policy samples ``n`` completions per unlabeled prompt (temperature 0.7).
2. All ``C(n, 2)`` pairs of a prompt's completions are labelled by the selector (FedBis) or
   by the majority vote of the U selectors (FedBiscuit).
3. The policy is DPO-trained on the labelled pairs with the existing
   :class:`~lightning_fed.modules.dpo.DPOModule` objective.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from lightning_fed.datamodules.selector import encode_choice_pair
from lightning_fed.datamodules.tokenize import PadCollator, encode_prompt, tokenize_preference
from lightning_fed.strategies.fedbiscuit import majority_vote


@torch.no_grad()
def sample_completions(
    model: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[str],
    n: int,
    max_new_tokens: int = 64,
    temperature: float = 0.7,
    seed: int = 0,
) -> list[list[str]]:
    """``n`` sampled completions of each prompt (new tokens only, special tokens dropped)."""
    if n < 2:
        raise ValueError(f"`n` must be >= 2 to form pairs, got {n}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    out = []
    try:
        for prompt in prompts:
            ids = torch.tensor([encode_prompt(tokenizer, prompt)], device=device)
            gen = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=temperature,
                top_k=0,
                num_return_sequences=n,
                max_new_tokens=max_new_tokens,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
            out.append([tokenizer.decode(g[ids.shape[1] :].tolist(), skip_special_tokens=True) for g in gen])
    finally:
        model.train(was_training)
    return out


@torch.no_grad()
def label_pairs(
    selector: Any,
    prompts: Sequence[str],
    completions: Sequence[Sequence[str]],
    template: str = "shp",
    max_length: int = 512,
    batch_size: int | None = None,
) -> list[dict[str, str]]:
    """Preference records from all ``C(n, 2)`` pairs of each prompt's completions.

    Each selector votes for the response it prefers (probability averaged over both orders,
    so its position bias cancels); with U selectors the majority vote decides.

    Args:
        selector: A :class:`~lightning_fed.modules.selector.BinarySelectorModule` (U >= 1, odd).
        prompts: The unlabeled prompts.
        completions: ``n`` completions per prompt.
        template: Selector prompt template (see ``SELECTOR_TEMPLATES``).
        max_length: Longest selector prompt in tokens.
        batch_size: Pairs per selector forward (default: all at once).
    """
    pairs = [(p, a, b) for p, outs in zip(prompts, completions) for a, b in itertools.combinations(outs, 2)]
    if not pairs:
        return []
    collate = PadCollator(selector.tokenizer.pad_token_id)
    items = [encode_choice_pair(template, p, a, b, selector.tokenizer, max_length) for p, a, b in pairs]
    step = batch_size or len(items)
    was_training, active = selector.training, selector.active_selector
    selector.eval()
    votes = []  # per chunk: (U, chunk) votes for the first response
    try:
        for start in range(0, len(items), step):
            batch = {k: v.to(selector.device) for k, v in collate(items[start : start + step]).items()}
            chunk = []
            for u in range(selector.num_selectors):
                selector.use_selector(u)
                chunk.append((selector.preference_probs(batch) > 0.5).long())
            votes.append(torch.stack(chunk))
    finally:
        selector.use_selector(active)
        selector.train(was_training)
    first_wins = majority_vote(torch.cat(votes, dim=1)).tolist()
    return [
        {"prompt": p, "chosen": a if w else b, "rejected": b if w else a} for (p, a, b), w in zip(pairs, first_wins)
    ]


def dpo_on_records(
    policy: pl.LightningModule,
    records: Sequence[dict[str, str]],
    steps: int,
    batch_size: int = 8,
    max_length: int = 256,
    **trainer_kwargs: Any,
) -> pl.Trainer:
    """DPO-train ``policy`` (a :class:`~lightning_fed.modules.dpo.DPOModule`) on ``records`` for ``steps`` steps."""
    tok = policy.tokenizer
    items = [tokenize_preference(r["prompt"], r["chosen"], r["rejected"], tok, max_length, "truncate") for r in records]
    loader = DataLoader(items, batch_size=batch_size, shuffle=True, collate_fn=PadCollator(tok.pad_token_id))
    for key, value in {
        "max_steps": steps,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }.items():
        trainer_kwargs.setdefault(key, value)
    trainer = pl.Trainer(**trainer_kwargs)
    trainer.fit(policy, train_dataloaders=loader)
    return trainer


def rlft(
    policy: pl.LightningModule,
    selector: Any,
    prompts: Sequence[str],
    n: int = 4,
    steps: int = 100,
    max_new_tokens: int = 64,
    temperature: float = 0.7,
    template: str = "shp",
    seed: int = 0,
    **dpo_kwargs: Any,
) -> list[dict[str, str]]:
    """Sample, label with the selector(s), DPO the policy; returns the generated preference set."""
    completions = sample_completions(policy.model, policy.tokenizer, prompts, n, max_new_tokens, temperature, seed)
    records = label_pairs(selector, prompts, completions, template)
    dpo_on_records(policy, records, steps, **dpo_kwargs)
    return records
