"""FedAvgM (Hsu et al., 2019, "Measuring the Effects of Non-Identical Data Distribution for
Federated Visual Classification", arXiv:1909.06335).

FedAvg with server momentum: the difference between the global model and the clients'
weighted average is treated as a gradient and fed to heavy-ball SGD on the server
(Section 3):

    d = x - avg,   v <- beta * v + d,   x <- x - server_lr * v

``momentum = 0`` with ``server_lr = 1`` is FedAvg.

``reference="openfedllm"`` follows OpenFedLLM's ``global_aggregate`` (Ye et al., 2024,
arXiv:2402.06954) instead: the first round takes ``v = d``, later rounds the exponential
average ``v <- beta * v + (1 - beta) * d``. At ``beta = 0.9`` its steady-state step is 10x
smaller than Hsu et al.'s (``d / (1 - beta)`` vs ``d``), so the two need different server lrs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from lightning_fed.option_rules import FEDAVGM_OWN, MOMENTUM_REFERENCES, check
from lightning_fed.state import StateDict, clone_state, compute_dtype, zeros_like_state
from lightning_fed.strategies.base import ClientUpdate
from lightning_fed.strategies.fedavg import FedAvg

REFERENCES = MOMENTUM_REFERENCES


class FedAvgM(FedAvg):
    """Federated averaging with server momentum.

    Args:
        server_lr: Server learning rate (the paper keeps ``1.0`` and tunes ``momentum``).
        momentum: Server momentum ``beta`` in ``[0, 1)``.
        weighting: See :class:`FedAvg`.
        reference: ``hsu`` (``v <- beta v + d``, Hsu et al., the default: the paper the method
            is named after) or ``openfedllm`` (``v <- beta v + (1 - beta) d`` after a first
            ``v = d``, to match OpenFedLLM's tables).
    """

    def __init__(
        self, server_lr: float = 1.0, momentum: float = 0.9, weighting: str = "num_examples", reference: str = "hsu"
    ) -> None:
        super().__init__(weighting=weighting, server_lr=server_lr)
        check(FEDAVGM_OWN, momentum=momentum, reference=reference)  # lightning_fed/option_rules.py
        self.momentum = float(momentum)
        self.reference = reference
        self.velocity: StateDict | None = None
        self.step = 0

    def setup(self, global_state: Mapping[str, Tensor], num_clients: int) -> None:
        """``v <- 0`` keyed like ``global_state``."""
        super().setup(global_state, num_clients)
        self.velocity = zeros_like_state(global_state)
        self.step = 0

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """One heavy-ball step on the pseudo-gradient ``x - avg``."""
        avg = self.average(updates)
        velocity = self.velocity if self.velocity is not None else {}
        out: StateDict = {}
        new_velocity: StateDict = {}
        for name, x in global_state.items():
            x32 = x.to(torch.promote_types(compute_dtype(x.dtype), avg[name].dtype))
            d = x32 - avg[name]  # pseudo-gradient
            v = velocity.get(name)
            if v is None or (self.reference == "openfedllm" and self.step == 0):
                v = d  # both rules start from v = d (Hsu: beta * 0 + d)
            elif self.reference == "hsu":
                v = self.momentum * v.to(x32.dtype) + d  # v <- beta * v + d
            else:
                v = self.momentum * v.to(x32.dtype) + (1.0 - self.momentum) * d  # OpenFedLLM
            new_velocity[name] = v
            out[name] = (x32 - self.server_lr * v).to(device="cpu", dtype=x.dtype)  # x <- x - lr * v
        self.velocity = new_velocity
        self.step += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        """The server velocity ``v`` and the number of server steps taken."""
        return {"velocity": clone_state(self.velocity or {}), "step": self.step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``v``; a missing entry keeps the current one.

        Raises:
            ValueError: a negative step count, or steps taken without a velocity (each step keeps one).
        """
        velocity = state.get("velocity")
        step = int(state.get("step", self.step))
        kept = clone_state(velocity) if velocity is not None else self.velocity
        if step < 0 or (step > 0 and not kept):
            raise ValueError(f"FedAvgM state: {step} server steps with no velocity (each step keeps one)")
        self.velocity, self.step = kept, step
