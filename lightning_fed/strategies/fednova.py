"""FedNova (Wang et al., 2020, "Tackling the Objective Inconsistency Problem in Heterogeneous
Federated Optimization", NeurIPS, arXiv:2007.07481).

When clients take different numbers of local steps ``tau_i`` (``local_epochs`` over data sets
of different sizes, stragglers), FedAvg's average of the models ``y_i`` weights each client by
how far it walked, not by ``p_i``: the federation converges to the optimum of a surrogate
objective weighted by ``p_i * tau_i`` (the paper's "objective inconsistency").
FedNova normalises each client's change by the length of its local path before averaging
(the paper's normalized update), then rescales by an effective number of steps:

    d_i     = (y_i - x) / ||a_i||_1
    tau_eff = sum_i p_i ||a_i||_1
    x      <- x + server_lr * tau_eff * sum_i p_i d_i

with ``p_i = |D_i| / sum_j |D_j|`` over the round's clients. ``a_i`` is the vector of weights
local SGD puts on the client's gradients; its 1-norm is ``tau_i`` for plain SGD and, for SGD
with momentum ``rho`` (the paper's momentum-SGD example of a_i),

    ||a_i||_1 = (tau_i - rho * (1 - rho**tau_i) / (1 - rho)) / (1 - rho).

With equal ``tau_i`` this is FedAvg exactly, hence the subclass. For an adaptive local
optimizer (the package's default AdamW) the paper gives no ``a_i``; ``local_momentum: 0``
then counts optimizer steps, each as one unit-weight step: an approximation of ours, exact
for plain SGD (``model.optimizer: sgd``).

The step count travels as the extension point intends: :class:`StepCount` (the client-side
:class:`~lightning_fed.strategies.base.LocalCorrection`) returns it from ``finish`` as the
extra ``"fednova/local_steps"`` (shape ``(1,)``), which reaches :meth:`FedNova.aggregate` in
:attr:`ClientUpdate.extras`, in-process and under Flower alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from lightning_fed.option_rules import FEDNOVA_OWN, check
from lightning_fed.state import StateDict, compute_dtype
from lightning_fed.strategies.base import AggregationError, ClientUpdate, LocalCorrection
from lightning_fed.strategies.fedavg import FedAvg

LOCAL_STEPS = "fednova/local_steps"


class StepCount(LocalCorrection):
    """FedNova's client side: no change to the gradients; uploads ``tau_i``."""

    def finish(self, params: Mapping[str, Tensor], num_steps: int, lr: float) -> StateDict:
        """``{"fednova/local_steps": tensor([tau_i])}``."""
        return {LOCAL_STEPS: torch.tensor([float(num_steps)])}


def path_length(num_steps: float, momentum: float = 0.0) -> float:
    """``||a_i||_1`` of ``num_steps`` local SGD steps with heavy-ball ``momentum`` (0: plain SGD)."""
    if momentum == 0.0:
        return float(num_steps)
    rho = float(momentum)
    return (num_steps - rho * (1.0 - rho**num_steps) / (1.0 - rho)) / (1.0 - rho)


class FedNova(FedAvg):
    """Normalized averaging: each client's change divided by its local path length.

    Args:
        weighting: ``"num_examples"`` (``p_i = |D_i| / n``, the paper's) or ``"uniform"``.
        server_lr: Global step size on the normalised update (1.0: the paper's FedNova).
        local_momentum: Momentum ``rho`` of the clients' local SGD, for ``||a_i||_1``; 0 counts
            steps (plain SGD, and the choice for adaptive local optimizers).

    Example:
        >>> x = {"w": torch.tensor([0.0])}
        >>> ups = [ClientUpdate(0, 1, {"w": torch.tensor([2.0])}, {LOCAL_STEPS: torch.tensor([1.0])}),
        ...        ClientUpdate(1, 1, {"w": torch.tensor([4.0])}, {LOCAL_STEPS: torch.tensor([4.0])})]
        >>> FedNova().aggregate(x, ups)["w"]  # 2.5 * (2/1 + 4/4) / 2; FedAvg would give 3.0
        tensor([3.7500])
    """

    def __init__(self, weighting: str = "num_examples", server_lr: float = 1.0, local_momentum: float = 0.0) -> None:
        super().__init__(weighting=weighting, server_lr=server_lr)
        check(FEDNOVA_OWN, local_momentum=local_momentum)  # lightning_fed/option_rules.py
        self.local_momentum = float(local_momentum)

    def local_correction(
        self, global_state: Mapping[str, Tensor], downlink: Mapping[str, Tensor], client_memory: dict[str, Tensor]
    ) -> StepCount:
        """A :class:`StepCount`: the client reports ``tau_i`` with its update."""
        return StepCount()

    def local_steps(self, update: ClientUpdate) -> float:
        """``tau_i`` of ``update``, read from its extras.

        Raises:
            AggregationError: If the extra is missing or not a non-negative whole number.
        """
        value = update.extras.get(LOCAL_STEPS)
        if value is None or value.numel() != 1:
            raise AggregationError(
                f"client {update.client_id}: FedNova needs extras[{LOCAL_STEPS!r}] (one number, the local step count),"
                f" got {None if value is None else tuple(value.shape)}"
            )
        tau = float(value.reshape(()))
        if tau < 0 or tau != int(tau):
            raise AggregationError(f"client {update.client_id}: {LOCAL_STEPS} must be a whole number >= 0, got {tau}")
        return tau

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """``x + server_lr * tau_eff * sum_i p_i (y_i - x) / ||a_i||_1`` (see the module docstring)."""
        if len(updates) == 0:
            raise AggregationError("FedNova: cannot aggregate zero updates")
        weights = self.weights(updates)
        total = float(sum(weights))
        p = [w / total for w in weights]
        norms = [path_length(self.local_steps(u), self.local_momentum) for u in updates]
        tau_eff = sum(p_i * a_i for p_i, a_i in zip(p, norms))
        out: StateDict = {}
        for name, x in global_state.items():
            x32 = x.to(compute_dtype(x.dtype))
            direction = torch.zeros_like(x32)
            for u, p_i, a_i in zip(updates, p, norms):
                if a_i > 0:  # a client that took no step did not move: d_i = 0
                    direction.add_(u.state[name].to(x32.dtype) - x32, alpha=p_i / a_i)  # p_i d_i
            out[name] = (x32 + self.server_lr * tau_eff * direction).to(device="cpu", dtype=x.dtype)
        return out
