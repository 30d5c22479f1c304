"""The DPO family's losses, chosen by name (``model.init_args.loss``), as TRL's ``loss_type`` and
torchtune's ``rlhf/loss`` classes.

Each is a pure function of the four sequence log-probabilities and ``beta`` returning
``(losses, chosen_rewards, rejected_rewards)``, each ``(B,)``, the rewards detached
(:mod:`~lightning_fed.modules.losses`' preference-loss contract), plus keyword options
(``model.init_args.loss_options``). :class:`~lightning_fed.modules.dpo.DPOModule` looks its loss
up here: a DPO variant is one function in this file under :func:`dpo_loss_function` and a config
naming it; a function outside the package is named by its dotted path (``my_pkg.losses.my_loss``).
See docs/developer/adding-a-method.md, "A DPO variant".
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch.nn.functional as F
from torch import Tensor

from lightning_fed.loss_options import loss_options_line
from lightning_fed.modules.losses import dpo_loss

#: ``(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta, **options)
#: -> (losses, chosen_rewards, rejected_rewards)``.
DPOLoss = Callable[..., tuple[Tensor, Tensor, Tensor]]

#: The package's DPO losses by name (:func:`dpo_loss_function` adds to it).
DPO_LOSSES: dict[str, DPOLoss] = {}


def dpo_loss_function(name: str) -> Callable[[DPOLoss], DPOLoss]:
    """Register the decorated function as the DPO loss ``name`` (``model.init_args.loss: name``)."""

    def register(fn: DPOLoss) -> DPOLoss:
        if name in DPO_LOSSES:
            raise ValueError(f"a DPO loss named {name!r} exists already ({DPO_LOSSES[name].__qualname__})")
        DPO_LOSSES[name] = fn
        return fn

    return register


def _ratios(policy_chosen: Tensor, policy_rejected: Tensor, reference_chosen: Tensor, reference_rejected: Tensor):
    return policy_chosen - reference_chosen, policy_rejected - reference_rejected


@dpo_loss_function("sigmoid")
def sigmoid(
    policy_chosen: Tensor, policy_rejected: Tensor, reference_chosen: Tensor, reference_rejected: Tensor, beta: float
) -> tuple[Tensor, Tensor, Tensor]:
    """DPO (Rafailov et al., 2023, Eq. (7)): ``-log sigmoid(beta * h)``, ``h`` the log-ratio margin."""
    return dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta)


@dpo_loss_function("ipo")
def ipo(
    policy_chosen: Tensor, policy_rejected: Tensor, reference_chosen: Tensor, reference_rejected: Tensor, beta: float
) -> tuple[Tensor, Tensor, Tensor]:
    """IPO (Azar et al., 2023, arXiv:2310.12036, Eq. (17)): ``(h - 1 / (2 beta))^2``, ``beta`` their ``tau``."""
    chosen, rejected = _ratios(policy_chosen, policy_rejected, reference_chosen, reference_rejected)
    losses = (chosen - rejected - 1 / (2 * beta)) ** 2
    return losses, beta * chosen.detach(), beta * rejected.detach()


@dpo_loss_function("hinge")
def hinge(
    policy_chosen: Tensor, policy_rejected: Tensor, reference_chosen: Tensor, reference_rejected: Tensor, beta: float
) -> tuple[Tensor, Tensor, Tensor]:
    """SLiC's hinge on the log-ratio margin (Zhao et al., 2023; TRL's ``hinge``): ``relu(1 - beta * h)``."""
    chosen, rejected = _ratios(policy_chosen, policy_rejected, reference_chosen, reference_rejected)
    losses = F.relu(1 - beta * (chosen - rejected))
    return losses, beta * chosen.detach(), beta * rejected.detach()


@dpo_loss_function("conservative")
def conservative(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    reference_chosen: Tensor,
    reference_rejected: Tensor,
    beta: float,
    label_smoothing: float = 0.1,
) -> tuple[Tensor, Tensor, Tensor]:
    """Conservative DPO (Mitchell, 2023, "A note on DPO with noisy preferences"; TRL's
    ``label_smoothing``): each label is flipped with probability ``label_smoothing``,
    ``-(1 - e) log sigmoid(beta h) - e log sigmoid(-beta h)``."""
    chosen, rejected = _ratios(policy_chosen, policy_rejected, reference_chosen, reference_rejected)
    logits = beta * (chosen - rejected)
    losses = -(1 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)
    return losses, beta * chosen.detach(), beta * rejected.detach()


def find_dpo_loss(name: str, options: Mapping[str, Any] | None = None) -> DPOLoss:
    """The loss ``name`` (a name of :data:`DPO_LOSSES` or a dotted path to a function), its
    ``options`` checked against its keyword arguments; one line naming ``model.loss`` or
    ``model.loss_options`` otherwise."""
    fn = DPO_LOSSES.get(name)
    if fn is None and "." in name:
        module, _, attr = name.rpartition(".")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"model.loss: cannot import {name!r} ({err})") from None
        if not callable(fn):
            raise ValueError(f"model.loss: {name!r} is not a function")
    if fn is None:
        raise ValueError(f"model.loss must be one of {sorted(DPO_LOSSES)} or a dotted path to a function, got {name!r}")
    params = list(inspect.signature(fn).parameters.values())[5:]  # after the 4 log-probs and beta
    known = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    unknown = sorted(set(options or {}) - known)
    if unknown:
        raise ValueError(loss_options_line(name, known, unknown))  # the precheck's line (lightning_fed/loss_options.py)
    return fn
