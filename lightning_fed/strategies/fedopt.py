"""FedOpt: adaptive server optimizers (Reddi et al., 2021, "Adaptive Federated
Optimization", ICLR, arXiv:2003.00295, Algorithm 2).

The weighted mean of the clients' models gives a pseudo-gradient ``Delta = avg - x``,
on which the server takes an Adam-like step:

    m <- beta_1 * m + (1 - beta_1) * Delta
    v <- update_v(v, Delta)                    # FedAdagrad / FedYogi / FedAdam
    x <- x + eta * m / (sqrt(v) + tau)

Initialisation follows the paper: ``m_{-1} = 0`` and ``v_{-1} = tau**2`` (it asks for
``v_{-1} >= tau^2``). There is **no bias correction**: this is Algorithm 2 as written. Flower's
newer ``flwr.serverapp.strategy.FedAdam`` differs: it starts ``v`` at zero and scales ``eta``
by Adam's bias correction ``sqrt(1 - beta_2^t) / (1 - beta_1^t)``, so the two do not agree
in early rounds.

The paper averages the clients' deltas uniformly (line 10); ``weighting="uniform"`` does the
same, the default weights them by ``|D_k|`` like :class:`FedAvg`.

``reference="openfedllm"`` reproduces OpenFedLLM's ``global_aggregate`` (Ye et al., 2024,
arXiv:2402.06954) instead, so its tables can be matched:

* the first round's first moment is the delta itself, ``m_0 = Delta_0`` (no ``(1 - beta_1)``),
  later rounds ``m <- beta_1 m + (1 - beta_1) Delta``; FedAdagrad has no momentum, ``m = Delta``;
* the second moment is updated with ``m`` where Reddi et al. use ``Delta``
  (``v <- v + m^2``, Yogi's and Adam's rules likewise on ``m^2``);
* the deltas are averaged uniformly and ``eta = 1e-3`` (its ``fedopt_eta``) unless given.

``reddi`` (the default) is Algorithm 2 as published: the method's own paper.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from lightning_fed.option_rules import FEDOPT, FEDOPT_REFERENCES, check
from lightning_fed.state import StateDict, clone_state, compute_dtype
from lightning_fed.strategies.base import ClientUpdate
from lightning_fed.strategies.fedavg import FedAvg

REFERENCES = FEDOPT_REFERENCES
_DEFAULTS = {"reddi": (1e-2, "num_examples"), "openfedllm": (1e-3, "uniform")}  # (server_lr, weighting)


class FedOpt(FedAvg):
    """Base of the adaptive server optimizers; subclasses define :meth:`_update_v`.

    Args:
        server_lr: Server learning rate ``eta`` (> 0); default ``1e-2`` (``reddi``) or
            ``1e-3`` (``openfedllm``).
        beta_1: First-moment decay in ``[0, 1)``.
        beta_2: Second-moment decay in ``[0, 1)``.
        tau: Adaptivity ``tau`` (> 0); also sets ``v_{-1} = tau**2``.
        weighting: How the clients' models are averaged, see :class:`FedAvg`; default
            ``num_examples`` (``reddi``) or ``uniform`` (``openfedllm``).
        reference: ``reddi`` (Algorithm 2 as published, the default) or ``openfedllm``
            (OpenFedLLM's code, see the module docstring).
    """

    #: OpenFedLLM keeps a first moment for this variant (not for FedAdagrad).
    openfedllm_momentum = True

    def __init__(
        self,
        server_lr: float | None = None,
        beta_1: float = 0.9,
        beta_2: float = 0.99,
        tau: float = 1e-3,
        weighting: str | None = None,
        reference: str = "reddi",
    ) -> None:
        check(
            FEDOPT, reference=reference, weighting=weighting, server_lr=server_lr, beta_1=beta_1, beta_2=beta_2, tau=tau
        )
        default_lr, default_weighting = _DEFAULTS[reference]
        self.reference = reference
        super().__init__(
            weighting=default_weighting if weighting is None else weighting,
            server_lr=default_lr if server_lr is None else server_lr,
        )
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.tau = float(tau)
        self.m: StateDict = {}
        self.v: StateDict = {}
        self.step = 0

    @abstractmethod
    def _update_v(self, v: Tensor, delta: Tensor) -> Tensor:
        """The second-moment rule: next ``v`` from the previous one and ``Delta`` (out of place)."""

    def setup(self, global_state: Mapping[str, Tensor], num_clients: int) -> None:
        """``m <- 0``, ``v <- tau**2``, step count 0."""
        super().setup(global_state, num_clients)
        self.m, self.v, self.step = {}, {}, 0
        for name, x in global_state.items():
            dtype = compute_dtype(x.dtype)
            self.m[name] = torch.zeros(x.shape, dtype=dtype)
            self.v[name] = torch.full(x.shape, self.tau**2, dtype=dtype)

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """One step of Algorithm 2 (lines 10-15) on ``Delta = avg - x``."""
        avg = self.average(updates)
        out: StateDict = {}
        new_m: StateDict = {}
        new_v: StateDict = {}
        for name, x in global_state.items():
            x32 = x.to(torch.promote_types(compute_dtype(x.dtype), avg[name].dtype))
            delta = avg[name] - x32  # Delta_t, line 10
            m = self.m.get(name)
            m = torch.zeros_like(x32) if m is None else m.to(x32.dtype)
            v = self.v.get(name)
            v = torch.full_like(x32, self.tau**2) if v is None else v.to(x32.dtype)
            if self.reference == "reddi":
                m = self.beta_1 * m + (1.0 - self.beta_1) * delta  # line 11
                v = self._update_v(v, delta)  # lines 12-14 (the variant's rule)
            else:  # OpenFedLLM: m_0 = Delta_0, no momentum for Adagrad, v updated with m
                first = self.step == 0 or not self.openfedllm_momentum
                m = delta if first else self.beta_1 * m + (1.0 - self.beta_1) * delta
                v = self._update_v(v, m)
            new_m[name], new_v[name] = m, v
            # x_{t+1} = x_t + eta * m_t / (sqrt(v_t) + tau), line 15
            out[name] = (x32 + self.server_lr * m / (v.sqrt() + self.tau)).to(device="cpu", dtype=x.dtype)
        self.m, self.v = new_m, new_v
        self.step += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        """The moments ``m``, ``v`` and the number of server steps taken."""
        return {"m": clone_state(self.m), "v": clone_state(self.v), "step": self.step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the moments and step count; missing entries keep their current values.

        Raises:
            ValueError: a state no run writes: a negative step count, or steps taken without both
                moments for the same parameters (every step writes ``m`` and ``v`` of each one).
        """
        m, v = clone_state(state.get("m", self.m)), clone_state(state.get("v", self.v))
        step = int(state.get("step", self.step))
        if step < 0 or (step > 0 and (not m or m.keys() != v.keys())):
            raise ValueError(
                f"{type(self).__name__} state: {step} server steps with moments m of {len(m)} and v of {len(v)}"
                " parameters (each step keeps both, for every parameter)"
            )
        self.m, self.v, self.step = m, v, step
