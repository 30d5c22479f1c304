"""ORPO as a local objective (Hong et al., 2024, "ORPO: Monolithic Preference Optimization without
Reference Model", EMNLP, arXiv:2403.07691).

One loss does supervised fine-tuning and preference alignment at once, with no reference model
(so no second forward, unlike DPO):

    L_ORPO = L_SFT + lambda * L_OR                                          # Eq. (6)
    L_OR   = -log sigmoid(log(odds(y_w|x) / odds(y_l|x)))                    # Eq. (7)
    odds(y|x) = P(y|x) / (1 - P(y|x)),  log P(y|x) = (1/m) sum_t log p(y_t|x, y_<t)

``L_SFT`` is the negative log-likelihood of the chosen response; ``P(y|x)`` is the
length-averaged (geometric-mean) token probability, which is what keeps ``1 - P`` away from 1
for long responses. Both come from :func:`~lightning_fed.modules.preference.concatenated_log_probs`
with ``average=True``: one concatenated forward of chosen and rejected.

Federated use is plain: the LoRA adapter is the shared state, every aggregation rule applies
(``configs/orpo.yaml`` uses FedAvg).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from lightning_fed.modules.losses import preference_metrics
from lightning_fed.modules.preference import (
    PreferenceModule,
    response_lengths,
    zero_dropout,
)
from lightning_fed.option_rules import ORPO_OWN, check


def log_odds(mean_log_prob: Tensor) -> Tensor:
    """``log(P / (1 - P))`` for ``log P = mean_log_prob`` (< 0), stable as ``P -> 0`` and ``P -> 1``."""
    # log(1 - P) = log(-expm1(log P)); log P is clamped below 0 so that a response scored with
    # probability exactly 1 (float rounding) gives a large finite log-odds, not inf.
    logp = mean_log_prob.clamp(max=-torch.finfo(mean_log_prob.dtype).tiny)
    return logp - torch.log(-torch.expm1(logp))


def orpo_loss(chosen: Tensor, rejected: Tensor, odds_ratio_weight: float) -> tuple[Tensor, Tensor, Tensor]:
    """ORPO's loss per pair from length-averaged log-probabilities.

    Args:
        chosen: ``(1/m) log p(y_w|x)`` per pair, shape ``(B,)``.
        rejected: ``(1/m) log p(y_l|x)``.
        odds_ratio_weight: ``lambda`` of Eq. (6).

    Returns:
        ``(losses, nll, log_odds_ratio)``, each ``(B,)``: ``losses = nll + lambda * L_OR`` with
        ``nll = -chosen`` (``L_SFT``) and ``log_odds_ratio = log odds(y_w|x) - log odds(y_l|x)``
        (detached), whose ``-log sigmoid`` is ``L_OR`` (Eq. (7)).
    """
    ratio = log_odds(chosen) - log_odds(rejected)
    nll = -chosen
    losses = nll - odds_ratio_weight * F.logsigmoid(ratio)  # Eq. (6) with Eq. (7)
    return losses, nll.detach(), ratio.detach()


class ORPOModule(PreferenceModule):
    """Odds-ratio preference optimisation of the adapter: SFT on the chosen response plus a
    log-odds-ratio penalty, no reference model.

    Metrics, per pair: ``loss``; ``nll`` (``L_SFT`` of the chosen response, per token);
    ``log_odds_ratio``; ``reward_margin`` (ORPO's implicit reward is the length-averaged
    log-probability: chosen minus rejected); ``reward_acc`` (margin > 0, ties one half);
    ``pref_acc`` (summed ``log p(y_w|x) > log p(y_l|x)``, the papers' preference accuracy).

    Args:
        odds_ratio_weight: ``lambda`` of Eq. (6), the weight of the odds-ratio term (the
            paper uses 0.1 to 0.25 on its LLMs; a tiny model trained briefly needs more).
        disable_dropout: Set every dropout probability of the model (LoRA's included) to 0, as
            TRL's ORPO trainer does by default: chosen and rejected are then scored by the same
            deterministic network, and the odds ratio is not dropout noise.
        **kwargs: See :class:`~lightning_fed.modules.base.FederatedModule`.
    """

    def __init__(self, *args: Any, odds_ratio_weight: float = 0.1, disable_dropout: bool = True, **kwargs: Any) -> None:
        check(ORPO_OWN, odds_ratio_weight=odds_ratio_weight)  # before the backbone loads
        super().__init__(*args, **kwargs)
        self.odds_ratio_weight = float(odds_ratio_weight)
        if disable_dropout:
            zero_dropout(self.model)

    def pair_metrics(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        chosen, rejected = self.sequence_log_probs(batch, average=True)
        losses, nll, ratio = orpo_loss(chosen, rejected, self.odds_ratio_weight)
        chosen_sum = chosen.detach() * response_lengths(batch["chosen_labels"])
        rejected_sum = rejected.detach() * response_lengths(batch["rejected_labels"])
        # ORPO's implicit reward is the length-averaged log-probability.
        metrics = preference_metrics(losses, chosen.detach(), rejected.detach(), chosen_sum, rejected_sum)
        return {**metrics, "nll": nll, "log_odds_ratio": ratio}
