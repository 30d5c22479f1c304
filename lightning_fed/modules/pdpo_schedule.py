"""FedPDPO's learning-rate decay (Zhu et al., 2026, arXiv:2603.19741, App. D.3).

App. D.3: "LR decay: factor 0.8, minimum LR = 1e-6; decay triggered when DPO loss
increases". The paper does not say whose loss; here it is each client's: a client's learning
rates are multiplied by ``factor`` at the start of a round in which it trains if its mean
local loss in the last round it trained was higher than in the round before that (a
per-round ``ReduceLROnPlateau`` with patience 0). The state is personal (kept by the client,
swapped in by the :class:`~lightning_fed.callbacks.FederatedLoop` and checkpointed with
the other personal parameters), so it resumes exactly and does not leak between clients.

(Sec. 5 of the paper mentions "cosine learning rate decay" instead; App. D.3 gives the
rule above with its values, which is what is implemented.)
"""

from __future__ import annotations

import torch
from torch import nn

NO_LOSS = float(torch.finfo(torch.float32).max)
"""``last_loss`` before the first closed round: no loss is above it, so the first never decays."""


class LossTriggeredDecay(nn.Module):
    """Per-client multiplicative learning-rate decay, triggered by a rise of the round loss.

    All state is held in non-trainable parameters (personal state; see
    :class:`~lightning_fed.modules.pdpo_loss.AdaptiveRewardScale` for why not buffers):
    ``scale`` (the current multiplier), ``last_loss`` (the mean loss of the last closed
    round), ``loss_sum``/``loss_count`` (the round being trained) and ``round`` (which round
    the running sums belong to, -1 before the first).

    Args:
        factor: Multiplier applied on a rise of the loss, in ``(0, 1)`` (0.8 in the paper).
        min_lr: Floor of every decayed learning rate (1e-6 in the paper).
    """

    def __init__(self, factor: float = 0.8, min_lr: float = 1e-6) -> None:
        super().__init__()
        problems = []
        if not 0 < factor < 1:
            problems.append(f"model.lr_decay must be in (0, 1) or null, got {factor}")
        if not min_lr >= 0:
            problems.append(f"model.min_lr must be >= 0, got {min_lr}")
        if problems:
            raise ValueError("; ".join(problems))
        self.factor, self.min_lr = float(factor), float(min_lr)
        for name, value in (
            ("scale", 1.0),
            # "no closed round yet": the largest float32, not inf, since a client's saved state must
            # be finite (federation/client_files.py refuses NaN and inf in a state file)
            ("last_loss", NO_LOSS),
            ("loss_sum", 0.0),
            ("loss_count", 0.0),
            ("round", -1.0),
        ):
            setattr(self, name, nn.Parameter(torch.tensor(value), requires_grad=False))

    @torch.no_grad()
    def start_step(self, round_idx: int) -> float:
        """Call before each local step of round ``round_idx``; returns the current multiplier.

        On the first step of a new round it closes the previous one: if its mean loss is
        above the one before, ``scale *= factor``.
        """
        if int(self.round.item()) != round_idx:
            if self.loss_count.item() > 0:
                mean = self.loss_sum.item() / self.loss_count.item()
                if mean > self.last_loss.item():  # the DPO loss increased: decay
                    self.scale.mul_(self.factor)
                self.last_loss.fill_(mean)
            self.loss_sum.zero_()
            self.loss_count.zero_()
            self.round.fill_(round_idx)
        return float(self.scale.item())

    @torch.no_grad()
    def observe(self, loss: float) -> None:
        """Add one local step's loss to the current round's mean."""
        self.loss_sum.add_(float(loss))
        self.loss_count.add_(1.0)

    def lr(self, base: float) -> float:
        """``base * scale``, floored at ``min_lr`` (never raised above ``base``)."""
        return max(base * float(self.scale.item()), min(self.min_lr, base))
