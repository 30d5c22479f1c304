"""FedYogi (Reddi et al., 2021, "Adaptive Federated Optimization", ICLR, arXiv:2003.00295,
Algorithm 2).

FedOpt with Yogi's second moment (Zaheer et al., 2018), Algorithm 2, line 13:

    v_t = v_{t-1} - (1 - beta_2) * Delta_t^2 * sign(v_{t-1} - Delta_t^2)

Unlike Adam's exponential average, ``v`` moves by an additive amount towards ``Delta^2``,
so a single large pseudo-gradient cannot blow it up.
"""

from __future__ import annotations

from torch import Tensor

from lightning_fed.strategies.fedopt import FedOpt


class FedYogi(FedOpt):
    """Adaptive federated optimization with a Yogi server.

    Args:
        server_lr: Server learning rate ``eta`` (> 0).
        beta_1: First-moment decay in ``[0, 1)``.
        beta_2: Second-moment rate in ``[0, 1)``.
        tau: Adaptivity ``tau`` (> 0); ``v`` starts at ``tau**2``.
        weighting: How the clients' models are averaged, see :class:`FedAvg`.
        reference: ``reddi`` (Algorithm 2) or ``openfedllm`` (``m_0 = Delta_0``, ``v`` updated
            with ``m``), see :mod:`lightning_fed.strategies.fedopt`.
    """

    def _update_v(self, v: Tensor, delta: Tensor) -> Tensor:
        d2 = delta.square()
        return v - (1.0 - self.beta_2) * d2 * (v - d2).sign()  # Algorithm 2, line 13
