"""SimPO as a local objective (Meng, Xia and Chen, 2024, "SimPO: Simple Preference Optimization
with a Reference-Free Reward", NeurIPS, arXiv:2405.14734).

The implicit reward is the policy's length-normalised log-probability, so no reference model
(and no reference forward or cache) is needed; a target margin ``gamma`` separates the two:

    r_SimPO(x, y) = beta / |y| * log pi(y|x)                                   # Eq. (4)
    L_SimPO = -log sigmoid(r_SimPO(x, y_w) - r_SimPO(x, y_l) - gamma)          # Eq. (6)

Both length-averaged log-probabilities come from one concatenated forward
(:func:`~lightning_fed.modules.preference.concatenated_log_probs` with ``average=True``); the loss
follows the package's preference-loss contract and the metrics come from
:func:`~lightning_fed.modules.losses.preference_metrics`. Federated use is plain: the LoRA adapter
is the shared state and every aggregation rule applies (``configs/fedsimpo.yaml`` uses FedAvg).
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor

from lightning_fed.modules.losses import preference_metrics
from lightning_fed.modules.preference import (
    PreferenceModule,
    response_lengths,
    zero_dropout,
)
from lightning_fed.option_rules import SIMPO_OWN, check


def simpo_loss(chosen: Tensor, rejected: Tensor, beta: float, gamma: float) -> tuple[Tensor, Tensor, Tensor]:
    """SimPO's loss per pair from length-averaged log-probabilities.

    Args:
        chosen: ``(1/|y_w|) log pi(y_w|x)`` per pair, shape ``(B,)``.
        rejected: ``(1/|y_l|) log pi(y_l|x)``.
        beta: Reward scale ``beta`` of Eq. (4) (2.0 to 2.5 in the paper).
        gamma: Target reward margin ``gamma`` of Eq. (6) (0.3 to 1.6 in the paper).

    Returns:
        ``(losses, chosen_rewards, rejected_rewards)``, each ``(B,)``: the rewards are
        ``beta * chosen`` and ``beta * rejected`` (Eq. (4)), detached.
    """
    chosen_rewards = beta * chosen  # Eq. (4)
    rejected_rewards = beta * rejected
    losses = -F.logsigmoid(chosen_rewards - rejected_rewards - gamma)  # Eq. (6)
    return losses, chosen_rewards.detach(), rejected_rewards.detach()


class SimPOModule(PreferenceModule):
    """Reference-free preference optimisation of the adapter with a length-normalised reward.

    Metrics, per pair (:func:`~lightning_fed.modules.losses.preference_metrics`): ``loss``;
    ``reward_margin`` (SimPO reward of chosen minus rejected, to compare with ``gamma``);
    ``reward_acc`` (margin > 0, ties one half); ``pref_acc`` (summed
    ``log p(y_w|x) > log p(y_l|x)``, the papers' preference accuracy).

    Args:
        beta: Reward scale of Eq. (4) (the paper uses 2.0 to 2.5).
        gamma: Target reward margin of Eq. (6) (the paper uses 0.3 to 1.6; TRL's default
            ``gamma_beta_ratio=0.5`` is ``gamma = beta / 2``). ``0`` is SimPO without a margin.
        disable_dropout: Set every dropout probability of the model (LoRA's included) to 0, as
            TRL does for its preference trainers: chosen and rejected are then scored by the same
            deterministic network, and the reward margin is not dropout noise.
        **kwargs: See :class:`~lightning_fed.modules.base.FederatedModule`.
    """

    def __init__(
        self, *args: Any, beta: float = 2.0, gamma: float = 1.0, disable_dropout: bool = True, **kwargs: Any
    ) -> None:
        check(SIMPO_OWN, beta=beta, gamma=gamma)  # before the backbone loads
        super().__init__(*args, **kwargs)
        self.beta, self.gamma = float(beta), float(gamma)
        if disable_dropout:
            zero_dropout(self.model)

    def pair_metrics(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        chosen, rejected = self.sequence_log_probs(batch, average=True)
        losses, r_chosen, r_rejected = simpo_loss(chosen, rejected, self.beta, self.gamma)
        chosen_sum = chosen.detach() * response_lengths(batch["chosen_labels"])
        rejected_sum = rejected.detach() * response_lengths(batch["rejected_labels"])
        return preference_metrics(losses, r_chosen, r_rejected, chosen_sum, rejected_sum)
