"""FedBiOT's emulator alignment objective, Eq. (2) (Wu et al., 2024, arXiv:2406.17706)::

    ||E(x) - E*(x)||^2 + lambda * KL(M(x; A, E) || M(x; A, E*))

The loss :class:`~lightning_fed.round_hooks.EmulatorAlignment` minimises on the server, a pure
function of the offsite module and one batch of public text, tested on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lightning_fed.hook_rules import L2_TERMS

if TYPE_CHECKING:
    from lightning_fed.modules.fedbiot import OffsiteModule


# KL_DIRECTIONS: ``eq2`` is ``KL(M(x;A,E) || M(x;A,E*))`` as printed, ``teacher_first`` the usual
# distillation order; L2_TERMS: how the first term is reduced (:func:`emulator_l2`). Declared with
# the hook's other options (lightning_fed/hook_rules.py).


def emulator_l2(h_emu: Tensor, h_full: Tensor, real: Tensor, l2_term: str = "sum") -> Tensor:
    """The first term of Eq. (2), ``||E(x) - E*(x)||^2``, reduced over the real tokens.

    Args:
        h_emu: ``E(x)``, shape ``(batch, seq, d)``.
        h_full: ``E*(x)``, same shape.
        real: Boolean mask ``(batch, seq)`` of the real (non-padding) tokens.
        l2_term: ``sum``: the squared Euclidean norm over the ``d`` hidden dimensions, mean
            over tokens (Eq. (2) as printed); ``mean``: the same divided by ``d`` (a
            per-dimension mean); ``rms``: the squared difference divided by the mean square of
            ``E*(x)`` (the authors' FederatedScope ``l2_norm``, from offsite-tuning, there over
            padding too); ``off``: zero, the KL term alone.

    Returns:
        A scalar in float32.
    """
    if l2_term not in L2_TERMS:
        raise ValueError(f"l2_term must be one of {L2_TERMS}, got {l2_term!r}")
    diff2 = (h_emu.float() - h_full.float()).pow(2)[real]  # (tokens, d)
    if l2_term == "off":
        return diff2.sum() * 0.0  # keeps the graph and the dtype; contributes nothing
    if l2_term == "sum":
        return diff2.sum(-1).mean()
    if l2_term == "mean":
        return diff2.mean()
    # rms: mean((E - E*)^2) / mean(E*^2) = mean(((E - E*) / std)^2), std = sqrt(mean(E*^2))
    return diff2.mean() / h_full.float().pow(2)[real].mean()


def alignment_loss(
    module: OffsiteModule, batch: Mapping[str, Tensor], lam: float, kl_direction: str = "eq2", l2_term: str = "sum"
) -> tuple[Tensor, Tensor, Tensor]:
    """Eq. (2) on one batch: ``(loss, l2, kl)``, each a mean over the batch's real tokens.

    ``l2`` is the emulator's output minus the non-compressed emulator's, reduced by
    :func:`emulator_l2` (``l2_term``); ``kl`` the per-token KL divergence of the next-token
    distributions, ``KL(M(x;A,E) || M(x;A,E*))`` as printed in Eq. (2) (``eq2``) or
    ``KL(M(x;A,E*) || M(x;A,E))`` (``teacher_first``, the usual distillation order).
    With ``l2_term="off"`` the returned ``l2`` is still the ``sum`` value, for monitoring, but
    ``loss = lam * kl``. Gradients flow into the emulator only through whatever requires grad.
    """
    ids, mask = batch["input_ids"], batch["attention_mask"]
    real = mask.bool()
    with torch.no_grad(), module.composition("full"), module.emulator_output("full") as h_full:
        logits_full = module.model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    with module.emulator_output("emulator") as h_emu:
        logits_emu = module.model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    h_emu, h_full = h_emu[0], h_full[0]
    l2 = emulator_l2(h_emu, h_full, real, l2_term)
    logp_emu = logits_emu.float().log_softmax(-1)
    logp_full = logits_full.float().log_softmax(-1)
    if kl_direction == "eq2":
        kl = (logp_emu.exp() * (logp_emu - logp_full)).sum(-1)
    else:
        kl = (logp_full.exp() * (logp_full - logp_emu)).sum(-1)
    kl = kl[real].mean()
    loss = l2 + lam * kl
    if l2_term == "off":
        with torch.no_grad():
            l2 = emulator_l2(h_emu, h_full, real, "sum")
    return loss, l2, kl
