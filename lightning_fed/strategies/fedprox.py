"""FedProx (Li et al., 2020, "Federated Optimization in Heterogeneous Networks", MLSys,
arXiv:1812.06127).

Each client minimises its local loss plus a proximal term that keeps it near the global
model it started from (Eq. (2)):

    h_k(w; w^t) = F_k(w) + mu/2 * ||w - w^t||^2

The server side is FedAvg. The client side is :class:`ProximalCorrection`, which adds the
proximal term's gradient ``mu * (w - w^t)`` to ``p.grad`` after every backward pass, so the
training loss itself needs no change.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from lightning_fed.option_rules import FEDPROX_OWN, check
from lightning_fed.strategies.base import LocalCorrection
from lightning_fed.strategies.fedavg import FedAvg


def proximal_term(params: Mapping[str, Tensor], anchor: Mapping[str, Tensor], mu: float) -> Tensor:
    """``mu/2 * sum_name ||params[name] - anchor[name]||^2`` over the names in both (Eq. (2)).

    Differentiable with respect to ``params``; computed in float32 (or wider) on the device
    of the parameters. Names of ``params`` absent from ``anchor`` do not contribute.

    Args:
        params: The client's current parameters ``w``.
        anchor: The global parameters ``w^t`` the client started from.
        mu: The proximal coefficient.
    """
    total: Tensor | None = None
    for name, p in params.items():
        if name not in anchor:
            continue
        dtype = torch.promote_types(p.dtype, torch.float32)
        diff = p.to(dtype) - anchor[name].to(device=p.device, dtype=dtype)
        sq = diff.pow(2).sum()
        total = sq if total is None else total + sq
    if total is None:
        return torch.zeros(())
    return 0.5 * mu * total


class ProximalCorrection(LocalCorrection):
    """Adds ``mu * (w - w^t)``, the gradient of the proximal term, to each ``p.grad``.

    Args:
        anchor: The global parameters ``w^t`` (copied once per device and dtype, so later
            in-place changes of the client's parameters cannot move the anchor).
        mu: The proximal coefficient.
    """

    def __init__(self, anchor: Mapping[str, Tensor], mu: float) -> None:
        self.anchor = dict(anchor)
        self.mu = float(mu)
        self._on_device: dict[str, Tensor] = {}

    def _anchor_like(self, name: str, p: Tensor) -> Tensor:
        w_g = self._on_device.get(name)
        if w_g is None or w_g.device != p.device or w_g.dtype != p.dtype:
            w_g = self.anchor[name].detach().to(device=p.device, dtype=p.dtype, copy=True)
            self._on_device[name] = w_g
        return w_g

    @torch.no_grad()
    def correct_gradients(self, params: Mapping[str, torch.nn.Parameter]) -> None:
        """``p.grad += mu * (p - w^t)`` for every parameter with a gradient and an anchor."""
        for name, p in params.items():
            if p.grad is None or name not in self.anchor:
                continue
            # gradient of mu/2 * ||w - w^t||^2, Eq. (2)
            p.grad.add_((p.detach() - self._anchor_like(name, p)).to(p.grad.dtype), alpha=self.mu)


class FedProx(FedAvg):
    """FedAvg on the server, proximal term on the clients.

    Args:
        mu: Proximal coefficient ``mu > 0`` (the paper tunes it in {0.001, 0.01, 0.1, 1}).
        weighting: See :class:`FedAvg`.
        server_lr: See :class:`FedAvg`.
    """

    def __init__(self, mu: float = 0.01, weighting: str = "num_examples", server_lr: float = 1.0) -> None:
        super().__init__(weighting=weighting, server_lr=server_lr)
        check(FEDPROX_OWN, mu=mu)  # lightning_fed/option_rules.py
        self.mu = float(mu)

    def local_correction(
        self, global_state: Mapping[str, Tensor], downlink: Mapping[str, Tensor], client_memory: dict[str, Tensor]
    ) -> ProximalCorrection:
        """A :class:`ProximalCorrection` anchored at ``global_state``."""
        return ProximalCorrection(global_state, self.mu)
