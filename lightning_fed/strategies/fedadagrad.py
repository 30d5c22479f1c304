"""FedAdagrad (Reddi et al., 2021, "Adaptive Federated Optimization", ICLR,
arXiv:2003.00295, Algorithm 2).

FedOpt with Adagrad's second moment, ``v_t = v_{t-1} + Delta_t^2`` (Algorithm 2, line 12):
``v`` only grows, so the server step shrinks over the rounds.
"""

from __future__ import annotations

from torch import Tensor

from lightning_fed.strategies.fedopt import FedOpt


class FedAdagrad(FedOpt):
    """Adaptive federated optimization with an Adagrad server.

    Args:
        server_lr: Server learning rate ``eta`` (> 0).
        beta_1: First-moment decay in ``[0, 1)``.
        beta_2: Ignored by the Adagrad rule (kept, and validated, so that every FedOpt
            variant accepts the same arguments).
        tau: Adaptivity ``tau`` (> 0); ``v`` starts at ``tau**2``.
        weighting: How the clients' models are averaged, see :class:`FedAvg`.
        reference: ``reddi`` or ``openfedllm`` (which uses no first moment, ``m = Delta``),
            see :mod:`lightning_fed.strategies.fedopt`.
    """

    openfedllm_momentum = False  # "In paper 'adaptive federated optimization', momentum is not used"

    def _update_v(self, v: Tensor, delta: Tensor) -> Tensor:
        return v + delta.square()  # Algorithm 2, line 12
