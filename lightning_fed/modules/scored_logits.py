"""Logits only where they are scored: the LM head on the positions whose next token is a loss token.

A causal LM's head maps every position's hidden state onto the whole vocabulary, but a preference
or SFT loss reads only the positions that predict a response token (``labels`` not ``-100``,
shifted by one): the prompt's and the padding's logits are computed and thrown away. On
SmolLM2-135M the head is about a fifth of a DPO step's matmul FLOPs (issue 43), most of it on the
prompt. TRL's ``use_logits_to_keep`` cuts the head to the last columns from the first scored
position of the batch on; Transformers' ``logits_to_keep`` takes an int or one set of columns for
every row (a per-row boolean mask only in recent releases, this package supports every 5.x). Here
the head reads the scored positions only, each row its own, flattened to ``(M, d)`` (``M`` the
batch's scored tokens): :func:`scored_logits` runs the model with a forward pre-hook on its output
embeddings that gathers those rows, so the model's own head and whatever it does after the head
(a logit scale, a soft cap) run unchanged on ``M`` positions instead of ``B x T``.

Every scored position's logits are the same computation as before, row for row; the log-probs
are spread back to ``(B, T-1)`` with zeros elsewhere, so a sequence's sum adds the same terms in
the same order (:meth:`ScoredLogits.token_log_probs`). A head that is itself a LoRA layer (an
adapter on ``lm_head``) runs on every position (the batching engine tags each row of an adapted
layer's input with its client, which a flattened input would lose) and its logits are gathered
after: the same contract, without the saving.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import Tensor, nn

from lightning_fed.modules.losses import IGNORE_INDEX, selective_log_softmax


def scored_positions(labels: Tensor) -> Tensor:
    """``(B, T)`` bool: position ``t`` is scored when it predicts a scored token (``labels[:, t+1]``
    not ``IGNORE_INDEX``); the last position predicts nothing."""
    keep = torch.zeros(labels.shape, dtype=torch.bool, device=labels.device)
    keep[:, :-1] = labels[:, 1:] != IGNORE_INDEX
    return keep


@dataclass
class ScoredLogits:
    """The logits of a batch's scored positions.

    Attributes:
        logits: ``(M, V)``: row ``m`` is the ``m``-th scored position in row-major order.
        target: ``(M,)`` the token each of those positions predicts.
        keep: ``(B, T)`` which positions are scored (:func:`scored_positions`).
    """

    logits: Tensor
    target: Tensor
    keep: Tensor

    @property
    def mask(self) -> Tensor:
        """``(B, T-1)``: the scored next-token positions (as ``token_log_probs`` returns them)."""
        return self.keep[:, :-1]

    def spread(self, values: Tensor) -> Tensor:
        """``(M,)`` per-position values back in place, ``(B, T-1)``, zeros at unscored positions."""
        full = values.new_zeros(self.keep.shape).masked_scatter(self.keep, values)
        return full[:, :-1]

    def token_log_probs(self) -> tuple[Tensor, Tensor]:
        """``(log_probs, mask)``, each ``(B, T-1)``: ``token_log_probs``'s contract (zeros where unscored)."""
        logps = selective_log_softmax(self.logits.unsqueeze(0), self.target.unsqueeze(0)).squeeze(0)
        return self.spread(logps), self.mask

    def sequence_log_probs(self) -> Tensor:
        """``(B,)`` summed log-probabilities of each row's scored tokens: ``log p(y|x)``."""
        return self.token_log_probs()[0].sum(-1)

    def nll(self) -> Tensor:
        """``(M,)`` next-token cross-entropy of each scored position (float32 or wider)."""
        logits = self.logits if self.logits.dtype == torch.float64 else self.logits.float()
        return F.cross_entropy(logits, self.target, reduction="none")

    def hits(self) -> Tensor:
        """``(B, T-1)`` bool: the greedy next token is the target (False where unscored)."""
        return self.spread((self.logits.argmax(-1) == self.target).float()).bool()


def output_head(model: nn.Module) -> nn.Module | None:
    """The module that maps ``model``'s last hidden state to logits, when it can read gathered rows:
    the output embeddings of the (PEFT-wrapped or plain) causal LM, unless it is an adapted layer."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    get = getattr(base, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if head is None or isinstance(head, BaseTunerLayer):
        return None
    return head


@contextmanager
def head_on_positions(head: nn.Module, keep: Tensor) -> Iterator[None]:
    """Inside the block, ``head`` reads ``hidden[keep]`` as one ``(1, M, d)`` sequence instead of
    ``hidden`` ``(B, T, d)``: its output (and the model's ``.logits``) is ``(1, M, V)``. ``keep`` is a
    ``(B, T)`` bool mask, or ``(M,)`` indices into the ``B * T`` positions (one may repeat: the shared
    prefix's last position is read by both sides, :mod:`~lightning_fed.modules.shared_prefix`)."""

    def gather(_module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        hidden, where = args[0], keep.to(args[0].device)
        rows = hidden[where] if where.dtype == torch.bool else hidden.flatten(0, 1)[where]
        return (rows.unsqueeze(0), *args[1:])

    handle = head.register_forward_pre_hook(gather)
    try:
        yield
    finally:
        handle.remove()


def scored_logits(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, labels: Tensor, **kwargs: Any
) -> ScoredLogits:
    """The logits of the scored positions of one forward of ``model`` (a Hugging Face / PEFT causal LM).

    Args:
        model: Called as ``model(input_ids=..., attention_mask=..., **kwargs)`` with a ``.logits`` output.
        input_ids / attention_mask: ``(B, T)``.
        labels: ``(B, T)`` aligned with ``input_ids``; ``IGNORE_INDEX`` where not scored.
        **kwargs: More arguments of the forward (``use_cache=False``).
    """
    keep = scored_positions(labels)
    target = labels[:, 1:][keep[:, :-1]]
    head = output_head(model)
    if head is None:  # an adapted head: every position, gathered after
        logits = model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
        return ScoredLogits(logits[keep], target, keep)
    with head_on_positions(head, keep):
        logits = model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
    return ScoredLogits(logits.reshape(-1, logits.shape[-1]), target, keep)


def head_logits(head: nn.Module, hidden: Tensor, labels: Tensor) -> ScoredLogits:
    """``head`` applied to the scored positions of ``hidden`` ``(B, T, d)`` only (a personal head)."""
    keep = scored_positions(labels)
    return ScoredLogits(head(hidden[keep]), labels[:, 1:][keep[:, :-1]], keep)
