"""Loss functions of the local objectives, kept small and separately tested.

Follows torchtune's ``rlhf/loss/dpo.py``: log-probabilities come from one shared helper
(:func:`token_log_probs`; :func:`selective_log_softmax` is TRL's form, the chosen token's logit
minus the row's logsumexp, without a full ``log_softmax`` copy) and each preference loss is a
pure function of sequence log-probabilities.

The preference-loss contract: a loss returns ``(losses, chosen_rewards, rejected_rewards)``, each
``(B,)``, the rewards detached (the implicit rewards the loss compares); the logged pair metrics
come from one function, :func:`preference_metrics`. A new objective (SimPO, IPO, KTO) is one
such loss function.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE_INDEX = -100


def token_log_probs(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token log-probabilities of ``labels`` under ``logits`` (next-token shifted).

    Args:
        logits: ``(B, T, V)`` outputs of a causal LM for ``input_ids`` of length ``T``.
        labels: ``(B, T)`` token ids aligned with ``input_ids``; ``IGNORE_INDEX`` marks tokens
            that are not scored (prompt and padding).

    Returns:
        ``(log_probs, mask)``, both ``(B, T-1)``: the log-probability of each next token and
        whether it is scored; float32 for half-precision logits, else the logits' dtype (float64
        logits give float64: a caller that asks for double precision keeps it).
    """
    # The labels are shifted, not the logits: slicing (B, T, V) logits would make the backward
    # copy the gradient into a fresh (B, T, V) buffer. Position T-1 predicts nothing (masked).
    target = torch.cat([labels[:, 1:], labels.new_full((labels.shape[0], 1), IGNORE_INDEX)], dim=1)
    mask = target != IGNORE_INDEX
    # The label logit minus the row's logsumexp: no (B, T, V) log_softmax copy. Neither form is a
    # function of the example alone: the forward's logits already move with the batch's padded
    # width (~2e-7), and whether the sum then rounds the same is luck. What must not depend on the
    # batch, the cached DPO reference, is computed one example at a time (reference_cache.py, issue 23).
    logps = selective_log_softmax(logits, target.masked_fill(~mask, 0)) * mask
    return logps[:, :-1], mask[:, :-1]


class _SelectiveLogSoftmax(torch.autograd.Function):
    """``logits[index] - logsumexp(logits)`` with a backward that allocates one ``(B, T, V)``
    buffer, the gradient (``onehot - softmax``, the log-softmax derivative), written in
    place; it saves the logits (alive anyway as the LM head's output) and the ``(B, T)``
    logsumexp. Autograd's own graph for the same expression (per-row logsumexp, stack, gather)
    peaks at 4-6.7 logits-sized buffers (measured), more than ``log_softmax`` + gather (3)."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, index: Tensor) -> Tensor:
        # One sequence at a time: at most a (T, V) temporary besides the logits.
        norm = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
        ctx.save_for_backward(logits, index, norm)
        return torch.gather(logits, -1, index.unsqueeze(-1)).squeeze(-1) - norm

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        logits, index, norm = ctx.saved_tensors
        # d/dx_j (x_i - logsumexp(x)) = [j == i] - softmax(x)_j
        out = torch.sub(logits, norm.unsqueeze(-1)).exp_().mul_(grad.neg().unsqueeze(-1))
        out.scatter_add_(-1, index.unsqueeze(-1), grad.unsqueeze(-1))
        return out, None


def selective_log_softmax(logits: Tensor, index: Tensor) -> Tensor:
    """``log_softmax(logits)`` at ``index`` along the last axis, in float32 or wider.

    ``logit[index] - logsumexp(logits)`` (TRL's ``selective_log_softmax``): only ``(B, T)``
    values are gathered, and the logsumexp runs one sequence at a time, so no second ``(B, T, V)``
    tensor is made in the forward, and the backward makes one (the gradient). Half-precision
    logits are upcast one sequence at a time, for the same reason.

    Args:
        logits: ``(B, T, V)``.
        index: ``(B, T)`` integer indices into ``V``.

    Returns:
        ``(B, T)`` log-probabilities.
    """
    if logits.dtype in (torch.float32, torch.float64):
        return _SelectiveLogSoftmax.apply(logits, index)
    # bf16/fp16: logsumexp in half precision loses digits, so each sequence is upcast and
    # normalised on its own (TRL's loop): at most one (T, V) float32 copy exists at a time.
    rows = [
        torch.gather(row.float().log_softmax(-1), -1, idx.unsqueeze(-1)).squeeze(-1) for row, idx in zip(logits, index)
    ]
    return torch.stack(rows)


def sequence_log_probs(logits: Tensor, labels: Tensor) -> Tensor:
    """Sum of the response tokens' log-probabilities, one value per sequence: ``log p(y|x)``."""
    logps, _ = token_log_probs(logits, labels)
    return logps.sum(-1)


def sft_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean next-token cross-entropy over response tokens only (prompt tokens are ``-100``)."""
    return F.cross_entropy(logits[:, :-1, :].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX)


def token_nll(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """``(nll, mask)``, each ``(B, T-1)``: the next-token cross-entropy of every position (float32 or
    wider; 0 where not scored) and whether it is scored; ``nll[mask].mean()`` is :func:`sft_loss`."""
    target = labels[:, 1:]
    nll = F.cross_entropy(
        logits[:, :-1, :].flatten(0, 1).float(), target.flatten(), ignore_index=IGNORE_INDEX, reduction="none"
    )
    return nll.view_as(target), target != IGNORE_INDEX


def dpo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    reference_chosen: Tensor,
    reference_rejected: Tensor,
    beta: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Direct Preference Optimization loss (Rafailov et al., 2023, Eq. 7).

    ``L = -log sigmoid(beta * [(log pi(y_w|x) - log ref(y_w|x)) - (log pi(y_l|x) - log ref(y_l|x))])``

    Args:
        policy_chosen: ``log pi(y_w|x)`` per pair, shape ``(B,)``.
        policy_rejected: ``log pi(y_l|x)``.
        reference_chosen: ``log ref(y_w|x)`` (no gradient).
        reference_rejected: ``log ref(y_l|x)``.
        beta: Inverse temperature of the implicit reward.

    Returns:
        ``(losses, chosen_rewards, rejected_rewards)``, each ``(B,)``; the rewards are the
        implicit rewards ``beta * (log pi - log ref)``, detached.
    """
    chosen_ratio = policy_chosen - reference_chosen
    rejected_ratio = policy_rejected - reference_rejected
    losses = -F.logsigmoid(beta * (chosen_ratio - rejected_ratio))
    return losses, beta * chosen_ratio.detach(), beta * rejected_ratio.detach()


TIE_RTOL = 1e-5
"""A reward margin this small relative to the summed log-probabilities it compares is a tie.

Before training the policy equals its reference, and every margin is the rounding between the two
forwards: exactly 0 where both take the same kernels (tiny GPT-2 here, 1 or 2 threads, float32 or
bfloat16, a batch of 4 against 1), but not on every path and CPU (``tiny``'s round 0 once printed
``reward_acc 0.542`` instead of 0.500). 1e-5 is float32's rounding of a sum of a few hundred token
log-probabilities; a trained margin is many orders larger (``beta`` times a log-ratio of O(0.1-10))."""


def preference_metrics(
    losses: Tensor, chosen_rewards: Tensor, rejected_rewards: Tensor, chosen_logps: Tensor, rejected_logps: Tensor
) -> dict[str, Tensor]:
    """The per-pair metrics of every preference objective, from its loss's outputs.

    Args:
        losses: Per-pair losses ``(B,)``.
        chosen_rewards / rejected_rewards: The rewards the loss compares (detached).
        chosen_logps / rejected_logps: Summed ``log p(y|x)`` of the two responses.

    Returns:
        ``loss``; ``reward_margin`` (chosen minus rejected reward); ``reward_acc`` (margin > 0,
        ties count one half; a margin within float32 rounding of the log-probabilities it comes
        from, :data:`TIE_RTOL` of their size, is a tie: before training the policy equals the
        reference and every margin is rounding, which differs between CPUs and batch shapes);
        ``pref_acc`` (``log p(y_w|x) > log p(y_l|x)``, the papers' preference accuracy).
    """
    margin = chosen_rewards - rejected_rewards
    scale = chosen_logps.detach().abs() + rejected_logps.detach().abs()
    tie = margin.abs() <= TIE_RTOL * scale
    return {
        "loss": losses,
        "reward_margin": margin,
        "reward_acc": torch.where(tie, 0.5, (margin > 0).float()),
        "pref_acc": (chosen_logps.detach() > rejected_logps.detach()).float(),
    }
