"""Win rate of a policy's responses judged by a binary selector (Wu et al., 2024,
arXiv:2407.03038, Sec. 7.1 "Evaluation" and Table 1).

The paper generates one greedy response per test prompt (App. B.1: temperature 0) and
reports the share of prompts on which the judge prefers it to the human reference,
``win rate = # wins / # prompts`` (Table 1: 5681 wins of 6553 prompts = 86.69%), with the
ties alongside (``86.69% (5681 / 26)``): ties count neither as wins nor as losses.

The judge here is a binary selector given by path (for example one trained centrally on
held-out data) instead of Auto-J. A selector answers ``A`` or ``B`` and has no "tie"
answer, so every pair is judged in both orders: the candidate wins when it is picked in both,
loses when the reference is picked in both, and it is a tie when the verdict flips with the
order (the judge picks the same letter both times: it is position-inconsistent on that pair).
With U selectors (FedBiscuit) each order is decided by their majority vote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lightning_fed.datamodules.selector import selector_prompt
from lightning_fed.datamodules.templates import format_prompt
from lightning_fed.datamodules.tokenize import PadCollator, encode_prompt
from lightning_fed.evaluation.generation import generate_responses
from lightning_fed.modules.lora import adapter_layers, adapters_disabled
from lightning_fed.strategies.fedbiscuit import majority_vote


@dataclass(frozen=True)
class WinRate:
    """Wins, ties and losses of a candidate against references over the same prompts."""

    wins: int
    ties: int
    losses: int

    @property
    def total(self) -> int:
        return self.wins + self.ties + self.losses

    @property
    def rate(self) -> float:
        """``wins / total``, as in Table 1 (ties are not half-wins)."""
        return self.wins / self.total if self.total else float("nan")

    def as_dict(self) -> dict[str, float | int]:
        return {"win_rate": self.rate, "wins": self.wins, "ties": self.ties, "losses": self.losses, "total": self.total}

    def __str__(self) -> str:
        return f"{100 * self.rate:.2f}% ({self.wins} / {self.ties})"  # Table 1's "Win Rate (# Wins / # Ties)"


class PairJudge(Protocol):
    """Anything that says, for each pair shown as (A, B), whether A is the better response."""

    def prefers_first(self, prompts: Sequence[str], first: Sequence[str], second: Sequence[str]) -> list[bool]: ...


def tally(candidate_as_a: Sequence[bool], reference_as_a: Sequence[bool]) -> WinRate:
    """Count wins, ties and losses from the two orders' verdicts.

    Args:
        candidate_as_a: Per prompt, whether the judge picked A when the candidate was A.
        reference_as_a: Per prompt, whether the judge picked A when the reference was A.
    """
    if len(candidate_as_a) != len(reference_as_a):
        raise ValueError(f"win rate: {len(candidate_as_a)} verdicts in order AB but {len(reference_as_a)} in order BA")
    wins = sum(bool(c) and not bool(r) for c, r in zip(candidate_as_a, reference_as_a))
    losses = sum(bool(r) and not bool(c) for c, r in zip(candidate_as_a, reference_as_a))
    return WinRate(wins=wins, ties=len(candidate_as_a) - wins - losses, losses=losses)


def win_rate(judge: PairJudge, prompts: Sequence[str], candidates: Sequence[str], references: Sequence[str]) -> WinRate:
    """Win rate of ``candidates`` against ``references`` (Table 1), each pair judged in both orders."""
    if not (len(prompts) == len(candidates) == len(references)) or not prompts:
        raise ValueError(
            f"win rate: need as many prompts, candidates and references (> 0), got {len(prompts)}, {len(candidates)} "
            f"and {len(references)}"
        )
    return tally(
        judge.prefers_first(prompts, candidates, references), judge.prefers_first(prompts, references, candidates)
    )


class SelectorJudge:
    """A :class:`~lightning_fed.modules.selector.BinarySelectorModule` as a :class:`PairJudge`.

    A is preferred when its answer logit beats B's (the labelling rule of Sec. 4,
    ``pi(0 | x, y_j, y_l) > pi(1 | x, y_j, y_l)``); with U selectors, by majority vote.

    Args:
        selector: The trained selector(s).
        template: The selector's prompt template, as it was trained (``shp``, ``tldr``, ``short``).
        max_length: Longest selector prompt in tokens; a longer pair is an error naming it.
        batch_size: Pairs per forward.
    """

    def __init__(self, selector: Any, template: str = "shp", max_length: int = 512, batch_size: int = 16) -> None:
        self.selector, self.template, self.max_length, self.batch_size = selector, template, max_length, batch_size

    @classmethod
    def from_path(cls, path: str, **kwargs: Any) -> SelectorJudge:
        """The selector saved at ``path`` (an adapter folder or ``.ckpt``, see :func:`load_selector`)."""
        from lightning_fed.modules.selector_source import load_selector

        return cls(load_selector(path), **kwargs)

    @torch.no_grad()
    def prefers_first(self, prompts: Sequence[str], first: Sequence[str], second: Sequence[str]) -> list[bool]:
        sel, tok = self.selector, self.selector.tokenizer
        items = []
        for i, (p, a, b) in enumerate(zip(prompts, first, second)):
            ids = encode_prompt(tok, selector_prompt(self.template, p, a, b))
            if len(ids) > self.max_length:
                raise ValueError(
                    f"win rate: pair {i} is {len(ids)} selector tokens > max_length={self.max_length}; raise it"
                )
            items.append({"input_ids": ids})
        collate = PadCollator(tok.pad_token_id)
        was_training, active = sel.training, sel.active_selector
        sel.eval()
        votes = []  # (U, N): selector u picks A
        try:
            for u in range(sel.num_selectors):
                sel.use_selector(u)
                picks = []
                for start in range(0, len(items), self.batch_size):
                    batch = {k: v.to(sel.device) for k, v in collate(items[start : start + self.batch_size]).items()}
                    logits = sel.choice_forward(batch["input_ids"], batch["attention_mask"])
                    picks.append(logits[:, 0] > logits[:, 1])
                votes.append(torch.cat(picks).long())
        finally:
            sel.use_selector(active)
            sel.train(was_training)
        return [bool(v) for v in majority_vote(torch.stack(votes)).tolist()]


def policy_responses(
    policy: Any,
    prompts: Sequence[str],
    template: str = "plain",
    max_new_tokens: int = 64,
    tuned: bool = True,
    system_prompt: str | None = None,
) -> list[str]:
    """Greedy responses (App. B.1) of a LoRA policy, or of its untuned base (``tuned=False``).

    Each prompt is formatted as the policy was trained (:func:`format_prompt`): ``chat`` is the
    policy tokenizer's own chat template, with ``system_prompt`` as its system turn.
    """
    formatted = [format_prompt(template, p, tokenizer=policy.tokenizer, system_prompt=system_prompt) for p in prompts]
    if tuned:
        return generate_responses(policy.model, policy.tokenizer, formatted, max_new_tokens)
    with adapters_disabled(adapter_layers(policy.model)):
        return generate_responses(policy.model, policy.tokenizer, formatted, max_new_tokens)


def policy_win_rate(
    policy: Any,
    judge: PairJudge,
    prompts: Sequence[str],
    references: Sequence[str] | None = None,
    template: str = "plain",
    max_new_tokens: int = 64,
    system_prompt: str | None = None,
) -> tuple[WinRate, list[str], list[str]]:
    """Win rate of the tuned policy against ``references`` (e.g. human summaries), or, when
    ``references`` is ``None``, against the untuned policy (its adapters disabled).

    The policy answers the prompts formatted with ``template`` (and ``system_prompt`` for
    ``chat``), as in its training data; the judge sees the raw prompts.

    Returns:
        ``(WinRate, candidate responses, reference responses)``.
    """
    candidates = policy_responses(policy, prompts, template, max_new_tokens, system_prompt=system_prompt)
    refs = (
        list(references)
        if references is not None
        else policy_responses(policy, prompts, template, max_new_tokens, tuned=False, system_prompt=system_prompt)
    )
    return win_rate(judge, prompts, candidates, refs), candidates, refs
