"""FedAMP (Huang et al., 2021, "Personalized Cross-Silo Federated Learning on Non-IID Data",
AAAI, arXiv:2007.03797), heuristic attention version (HeurFedAMP).

The server keeps the latest model ``w_j`` of every client and gives client ``i`` its own
*personalized cloud model* ``u_i = sum_j xi_ij w_j`` (Eq. 5), an attention-weighted mean
that leans on the clients whose models are most similar to ``i``'s. HeurFedAMP's weights
are a softmax of ``sigma * cos(w_i, w_j)``; here ``sigma = 1 / temperature`` and the softmax
includes ``i`` itself, whose weight is then floored at ``self_weight_floor`` (FedPDPO
App. D.3: temperature 0.5, floor 0.05). The client trains from ``u_i``
(:meth:`Strategy.client_model`), optionally with FedAMP's proximal pull ``mu/2 ||w - u_i||^2``.

Similarity is measured on the change of each client's shared state since the common
initialisation: LoRA's ``A`` matrices all start from the same random draw, which would make
raw parameter vectors look alike whatever the clients learned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from lightning_fed.option_rules import FEDAMP, check
from lightning_fed.state import StateDict, clone_state
from lightning_fed.strategies.base import ClientUpdate, LocalCorrection, Strategy, weighted_average
from lightning_fed.strategies.fedprox import ProximalCorrection


def attention_weights(vectors: Tensor, temperature: float, self_weight_floor: float) -> Tensor:
    """FedAMP's attention matrix ``xi`` ``(N, N)``, each row summing to one.

    ``xi_i = softmax_j(cos(v_i, v_j) / temperature)``, then ``xi_ii`` is raised to at least
    ``self_weight_floor`` and the other weights of the row shrink proportionally.

    Args:
        vectors: ``(N, D)`` one flattened vector per client.
        temperature: Similarity temperature (``sigma = 1 / temperature``).
        self_weight_floor: Smallest weight a client gives its own model, in [0, 1].
    """
    n = vectors.shape[0]
    if n == 1:
        return torch.ones(1, 1, dtype=torch.float64)
    unit = F.normalize(vectors.to(torch.float64), dim=1)
    cos = unit @ unit.T
    cos.fill_diagonal_(1.0)  # a client is its own nearest neighbour, even before it moved
    xi = torch.softmax(cos / temperature, dim=1)
    diag = xi.diagonal().clone()
    floored = diag.clamp(min=self_weight_floor)
    others = (1 - floored) / (1 - diag).clamp(min=torch.finfo(torch.float64).tiny)
    xi = xi * others.unsqueeze(1)
    idx = torch.arange(n)
    xi[idx, idx] = floored
    return xi


def flatten_change(state: Mapping[str, Tensor], origin: Mapping[str, Tensor]) -> Tensor:
    """``state - origin`` as one float64 vector, in sorted key order."""
    return torch.cat([(state[k].double() - origin[k].double()).flatten() for k in sorted(origin)])


class FedAMP(Strategy):
    """Attention-weighted personalized aggregation.

    :meth:`aggregate` stores the uploaded models, recomputes every known client's ``u_i``,
    and returns the ``|D_j|``-weighted mean of the latest models (the start of clients never
    seen, and the adapter written at the end of a run).

    Args:
        temperature: Similarity temperature (> 0); lower concentrates on the most similar.
        self_weight_floor: Lowest attention a client pays to its own model, in [0, 1].
        prox_mu: FedAMP's proximal coefficient towards ``u_i`` during local training
            (``0`` disables it).
    """

    def __init__(self, temperature: float = 0.5, self_weight_floor: float = 0.05, prox_mu: float = 0.0) -> None:
        check(FEDAMP, temperature=temperature, self_weight_floor=self_weight_floor, prox_mu=prox_mu)
        self.temperature, self.self_weight_floor, self.prox_mu = (
            float(temperature),
            float(self_weight_floor),
            float(prox_mu),
        )
        self.origin: StateDict = {}
        self.models: dict[int, StateDict] = {}
        self.sizes: dict[int, int] = {}
        self.personalized: dict[int, StateDict] = {}
        self.attention: Tensor | None = None

    def setup(self, global_state: Mapping[str, Tensor], num_clients: int) -> None:
        super().setup(global_state, num_clients)
        if not self.origin:
            self.origin = clone_state(global_state)

    def client_model(self, client_id: int, global_state: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
        """``u_i`` for a client the server has a model of, else the global state."""
        return self.personalized.get(client_id, global_state)

    def local_correction(
        self, global_state: Mapping[str, Tensor], downlink: Mapping[str, Tensor], client_memory: dict[str, Tensor]
    ) -> LocalCorrection:
        """``mu (w - u_i)`` added to the gradients when ``prox_mu > 0`` (``global_state`` is ``u_i``)."""
        return ProximalCorrection(global_state, self.prox_mu) if self.prox_mu > 0 else LocalCorrection()

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        if not self.origin:
            self.origin = clone_state(global_state)
        for update in updates:
            self.models[update.client_id] = clone_state(update.state)
            self.sizes[update.client_id] = int(update.num_examples)
        self._personalize()
        ids = sorted(self.models)
        return weighted_average([self.models[c] for c in ids], [self.sizes[c] for c in ids])

    def _personalize(self) -> None:
        """``u_i = sum_j xi_ij w_j`` for every client with a model (Eq. 5)."""
        ids = sorted(self.models)
        if not ids:
            self.personalized, self.attention = {}, None
            return
        vectors = torch.stack([flatten_change(self.models[c], self.origin) for c in ids])
        xi = attention_weights(vectors, self.temperature, self.self_weight_floor)
        models = [self.models[c] for c in ids]
        self.personalized = {c: weighted_average(models, xi[row].tolist()) for row, c in enumerate(ids)}
        self.attention = xi

    def state_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "models": {str(c): s for c, s in self.models.items()},
            "sizes": {str(c): n for c, n in self.sizes.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.origin = clone_state(state.get("origin", {})) or self.origin
        self.models = {int(c): clone_state(s) for c, s in state.get("models", {}).items()}
        self.sizes = {int(c): int(n) for c, n in state.get("sizes", {}).items()}
        self._personalize()
