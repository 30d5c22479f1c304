"""FedAdam (Reddi et al., 2021, "Adaptive Federated Optimization", ICLR, arXiv:2003.00295,
Algorithm 2).

FedOpt with Adam's second moment, ``v_t = beta_2 * v_{t-1} + (1 - beta_2) * Delta_t^2``
(Algorithm 2, line 14), without bias correction (see :mod:`lightning_fed.strategies.fedopt`).
"""

from __future__ import annotations

from torch import Tensor

from lightning_fed.strategies.fedopt import FedOpt


class FedAdam(FedOpt):
    """Adaptive federated optimization with an Adam server.

    Args:
        server_lr: Server learning rate ``eta`` (> 0).
        beta_1: First-moment decay in ``[0, 1)``.
        beta_2: Second-moment decay in ``[0, 1)``.
        tau: Adaptivity ``tau`` (> 0); ``v`` starts at ``tau**2``.
        weighting: How the clients' models are averaged, see :class:`FedAvg`.
        reference: ``reddi`` (Algorithm 2) or ``openfedllm`` (``m_0 = Delta_0``, ``v`` updated
            with ``m``), see :mod:`lightning_fed.strategies.fedopt`.
    """

    def _update_v(self, v: Tensor, delta: Tensor) -> Tensor:
        return self.beta_2 * v + (1.0 - self.beta_2) * delta.square()  # Algorithm 2, line 14
