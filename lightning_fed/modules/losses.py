"""Loss functions of the local objectives, kept small and separately tested.

Follows torchtune's ``rlhf/loss/dpo.py``: log-probabilities come from one shared helper and
the DPO loss is a pure function of the four sequence log-probabilities.
"""

from __future__ import annotations

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
        whether it is scored.
    """
    logits = logits[:, :-1, :]
    labels = labels[:, 1:]
    mask = labels != IGNORE_INDEX
    safe = labels.masked_fill(~mask, 0)
    # log_softmax then gather: the selective form avoids materialising a second V-sized copy.
    logps = torch.gather(logits.float().log_softmax(-1), 2, safe.unsqueeze(-1)).squeeze(-1)
    return logps * mask, mask


def sequence_log_probs(logits: Tensor, labels: Tensor) -> Tensor:
    """Sum of the response tokens' log-probabilities, one value per sequence: ``log p(y|x)``."""
    logps, _ = token_log_probs(logits, labels)
    return logps.sum(-1)


def sft_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean next-token cross-entropy over response tokens only (prompt tokens are ``-100``)."""
    return F.cross_entropy(logits[:, :-1, :].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=IGNORE_INDEX)


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
