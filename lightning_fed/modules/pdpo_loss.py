"""The PDPO objective (Zhu et al., 2026, arXiv:2603.19741, Sec. 3.2.2): small, pure pieces.

``Delta = Delta_ir + w_r * s * Delta_er`` (Eq. 6), ``L = -log sigmoid(beta * Delta)`` (Eq. 8),
with ``s`` an exponential moving average of ``E|Delta_ir| / (E|Delta_er| + eps)`` (Eq. 7)
and ``w_r`` linear in the round (App. D.3: 0.5 -> 1.5).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def implicit_margin(
    policy_chosen: Tensor, policy_rejected: Tensor, reference_chosen: Tensor, reference_rejected: Tensor
) -> Tensor:
    """``Delta_ir = log pi(y_w|x)/ref(y_w|x) - log pi(y_l|x)/ref(y_l|x)`` per pair (Eq. 4)."""
    return (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)


def combined_margin(delta_ir: Tensor, delta_er: Tensor, reward_weight: float, scale: Tensor | float) -> Tensor:
    """``Delta = Delta_ir + w_r * s * Delta_er`` (Eq. 6); ``s`` carries no gradient."""
    if torch.is_tensor(scale):
        scale = scale.detach()
    return delta_ir + reward_weight * scale * delta_er


def pdpo_loss(delta: Tensor, beta: float) -> Tensor:
    """``-log sigmoid(beta * Delta)`` per pair (Eq. 8); the batch mean is the objective."""
    return -F.logsigmoid(beta * delta)


def scale_ratio(delta_ir: Tensor, delta_er: Tensor, eps: float = 1e-8) -> Tensor:
    """The batch estimate of Eq. (7): ``E|Delta_ir| / (E|Delta_er| + eps)``, detached."""
    return delta_ir.detach().abs().mean() / (delta_er.detach().abs().mean() + eps)


def reward_weight(round_idx: int, rounds: int, start: float = 0.5, end: float = 1.5) -> float:
    """``w_r`` in round ``round_idx`` (0-based) of ``rounds``: linear from ``start`` to ``end``.

    Round 0 uses ``start`` and the last round ``end``; a single-round run uses ``start``.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if rounds == 1:
        return float(start)
    t = min(max(round_idx, 0), rounds - 1) / (rounds - 1)
    return float(start + (end - start) * t)


class AdaptiveRewardScale(nn.Module):
    """The EMA ``s`` of Eq. (7), kept as non-trainable parameters so that it is personal state.

    The :class:`~lightning_fed.callbacks.FederatedLoop` swaps *parameters* per client and
    checkpoints them; a plain buffer would be shared by all simulated clients and lost on
    resume. ``value`` starts at the first batch's ratio (``count`` is 0 before that), so
    that early rounds are not biased towards an arbitrary initial value; afterwards
    ``s <- momentum * s + (1 - momentum) * ratio``.

    Args:
        momentum: EMA momentum (0.95 in the paper).
        eps: Stabiliser of the ratio's denominator.
    """

    def __init__(self, momentum: float = 0.95, eps: float = 1e-8) -> None:
        super().__init__()
        if not 0 <= momentum < 1:
            raise ValueError(f"model.scale_momentum must be in [0, 1), got {momentum}")
        self.momentum, self.eps = float(momentum), float(eps)
        self.value = nn.Parameter(torch.ones(()), requires_grad=False)
        self.count = nn.Parameter(torch.zeros(()), requires_grad=False)

    @torch.no_grad()
    def update(self, delta_ir: Tensor, delta_er: Tensor) -> Tensor:
        """Fold one batch's ratio into the EMA and return the new ``s`` (detached)."""
        ratio = scale_ratio(delta_ir, delta_er, self.eps).to(self.value)
        if self.count.item() == 0:
            self.value.copy_(ratio)
        else:
            self.value.mul_(self.momentum).add_((1 - self.momentum) * ratio)
        self.count.add_(1)
        return self.value.detach().clone()


def exclusion_mask(losses: Tensor, k: float, max_ratio: float = 0.5) -> Tensor:
    """Which pairs of a batch to keep under FedPDPO's sample exclusion (App. D.3).

    The paper gives only "sample exclusion threshold (k=2, maximum exclusion ratio 0.5)".
    Read as the usual k-sigma rule: a pair whose loss lies more than ``k`` standard deviations
    above the batch mean (``loss > mean + k * std``, population std) is treated as a likely
    mislabelled or outlying preference and left out of the step; at most
    ``floor(max_ratio * B)`` pairs are left out, the highest losses first.

    Args:
        losses: ``(B,)`` per-pair losses (Eq. 8), detached or not.
        k: Threshold in standard deviations (2 in the paper).
        max_ratio: Largest fraction of the batch that may be left out (0.5 in the paper).

    Returns:
        ``(B,)`` boolean mask, ``True`` for the pairs kept.
    """
    losses = losses.detach().float()
    keep = torch.ones_like(losses, dtype=torch.bool)
    cap = int(max_ratio * losses.numel())
    if losses.numel() < 2 or cap < 1:
        return keep
    threshold = losses.mean() + k * losses.std(unbiased=False)
    order = torch.argsort(losses, descending=True)[:cap]  # the candidates, highest loss first
    drop = order[losses[order] > threshold]
    keep[drop] = False
    return keep
