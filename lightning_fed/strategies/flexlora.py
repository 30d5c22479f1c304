"""FlexLoRA (Bai et al., 2024, "Federated Fine-tuning of Large Language Models under
Heterogeneous Tasks and Client Resources", NeurIPS, arXiv:2402.11505).

Averaging ``A`` and ``B`` separately (HetLoRA, FedAvg) is not averaging the weight changes:
``mean(B) mean(A) != mean(B A)``. FlexLoRA averages the full-size products instead,
``W = sum_k p_k B_k A_k`` (``p_k = n_k / n`` over the round's clients), and hands each client
the best rank-``r_k`` approximation of ``W`` by truncated SVD, so a client of any rank starts
from the same aggregate, as closely as its rank allows (exactly when ``rank(W) <= r_k``).

The server keeps ``W`` per LoRA module (in :meth:`state_dict`, so a resumed run redistributes
the same factors); the global state is the rank-``r_max`` truncation. The singular values are
split evenly, ``B = U sqrt(S)``, ``A = sqrt(S) V^T``; the product (what the model uses) does not
depend on the split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from lightning_fed.state import StateDict
from lightning_fed.strategies.base import ClientUpdate
from lightning_fed.strategies.heterogeneous_rank import HeterogeneousRankLoRA
from lightning_fed.strategies.lora_factors import lora_pairs, lora_product, svd_factors


def average_products(states: Sequence[Mapping[str, Tensor]], weights: Sequence[float]) -> dict[str, Tensor]:
    """Per LoRA module, ``sum_k w_k B_k A_k / sum_k w_k`` (float32 or wider, full size)."""
    total = float(sum(weights))
    out: dict[str, Tensor] = {}
    for module, (a_key, b_key) in lora_pairs(states[0]).items():
        acc = None
        for state, w in zip(states, weights):
            term = lora_product(state[a_key], state[b_key]) * (float(w) / total)
            acc = term if acc is None else acc + term
        out[module] = acc
    return out


def redistribute(
    products: Mapping[str, Tensor], pairs: Mapping[str, tuple[str, str]], rank: int, like: Mapping[str, Tensor]
) -> StateDict:
    """LoRA factors of rank ``rank`` whose products are the truncated SVDs of ``products``, in ``like``'s dtypes."""
    out: StateDict = {}
    for module, (a_key, b_key) in pairs.items():
        a, b = svd_factors(products[module], rank)
        out[a_key], out[b_key] = a.to(like[a_key].dtype), b.to(like[b_key].dtype)
    return out


class FlexLoRA(HeterogeneousRankLoRA):
    """Average the clients' ``B A`` at full size, redistribute by truncated SVD to each rank.

    Args:
        client_ranks: Each client's rank (see :class:`HeterogeneousRankLoRA`).
        weighting: ``"num_examples"`` (the paper's ``n_k / n``) or ``"uniform"``.
    """

    def __init__(self, client_ranks: Sequence[int] | None = None, weighting: str = "num_examples") -> None:
        super().__init__(client_ranks, weighting)
        #: ``W`` per LoRA module after the last aggregation (empty before the first).
        self.products: dict[str, Tensor] = {}

    def client_model(self, client_id: int, global_state: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
        """Rank-``r_k`` truncated SVD of ``W`` (the global state truncated before any aggregation)."""
        if not self.products:
            return super().client_model(client_id, global_state)
        out = dict(global_state)
        out.update(redistribute(self.products, lora_pairs(global_state), self.rank_of(client_id), global_state))
        return out

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        self.check_ranks(global_state, updates)
        self.products = average_products([u.state for u in updates], self.weights(updates))
        out = self.average_other_keys(global_state, updates)
        out.update(redistribute(self.products, lora_pairs(global_state), self.max_rank, global_state))
        return {k: out[k] for k in global_state}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "products": {k: v.clone() for k, v in self.products.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.products = {k: v.clone() for k, v in state.get("products", {}).items()}
