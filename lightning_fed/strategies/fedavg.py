"""FedAvg (McMahan et al., 2017, "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS, arXiv:1602.05629).

The server replaces the global model by the mean of the clients' models, each weighted by
the size of its local data set ``n_k / n`` (Algorithm 1). With ``server_lr != 1`` the mean
is approached by a step of that size, ``x <- x + server_lr * (avg - x)``: the "server
learning rate" of Reddi et al. (2021, arXiv:2003.00295, Algorithm 1 with SGD as the server
optimizer). ``server_lr = 1`` is plain averaging.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from lightning_fed.option_rules import FEDAVG, check
from lightning_fed.state import StateDict, compute_dtype
from lightning_fed.strategies.base import AggregationError, ClientUpdate, Strategy, weighted_average


class FedAvg(Strategy):
    """Federated averaging of the clients' parameters.

    Args:
        weighting: ``"num_examples"`` weights client ``k`` by ``|D_k|`` (the paper's
            ``n_k / n``); ``"uniform"`` gives every participating client the same weight.
        server_lr: Step towards the average; ``1.0`` replaces the global state by it.

    Example:
        >>> import torch
        >>> strategy = FedAvg()
        >>> x = {"w": torch.tensor([1.0, 2.0])}
        >>> ups = [ClientUpdate(0, 1, {"w": torch.tensor([3.0, 4.0])}),
        ...        ClientUpdate(1, 3, {"w": torch.tensor([7.0, 0.0])})]
        >>> strategy.aggregate(x, ups)["w"]
        tensor([6., 1.])
    """

    def __init__(self, weighting: str = "num_examples", server_lr: float = 1.0) -> None:
        check(FEDAVG, weighting=weighting, server_lr=server_lr)  # lightning_fed/option_rules.py
        self.weighting = weighting
        self.server_lr = float(server_lr)

    def weights(self, updates: Sequence[ClientUpdate]) -> list[float]:
        """The averaging weight of each update (unnormalised): ``|D_k|`` or 1 (``weighting``).

        The extension point for a new weighting: :meth:`average`, and so every strategy of the
        FedAvg family that steps on the mean, uses whatever a subclass returns here (one finite
        weight >= 0 per update, positive sum; see docs/developer/adding-a-method.md).
        """
        if self.weighting == "uniform":
            return [1.0] * len(updates)
        return [float(u.num_examples) for u in updates]

    def average(self, updates: Sequence[ClientUpdate]) -> StateDict:
        """Weighted mean of the clients' states, ``sum_k w_k y_k / sum_k w_k``.

        The result stays in the float32-or-wider accumulator dtype, so that subclasses can
        take differences with the global state without rounding first.

        Raises:
            AggregationError: If ``updates`` is empty.
        """
        if len(updates) == 0:
            raise AggregationError(f"{type(self).__name__}: cannot aggregate zero updates")
        return weighted_average([u.state for u in updates], self.weights(updates), cast_back=False)

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """``x <- x + server_lr * (avg - x)``, i.e. ``avg`` itself when ``server_lr == 1``."""
        avg = self.average(updates)
        out: StateDict = {}
        for name, x in global_state.items():
            if self.server_lr == 1.0:
                new = avg[name]  # exact mean, no x + (avg - x) rounding
            else:
                x32 = x.to(torch.promote_types(compute_dtype(x.dtype), avg[name].dtype))
                new = x32 + self.server_lr * (avg[name] - x32)
            out[name] = new.to(device="cpu", dtype=x.dtype)
        return out
