"""FLoRA (Wang et al., 2024, "FLoRA: Federated Fine-Tuning Large Language Models with
Heterogeneous Low-Rank Adaptations", NeurIPS, arXiv:2409.05976).

Stacking instead of averaging: with ``p_k = n_k / n`` over the round's clients,

    ``[B_1 ... B_K] [p_1 A_1; ...; p_K A_K] = sum_k p_k B_k A_k``

so the stacked adapter, of rank ``sum_k r_k``, *is* the weighted mean of the clients' weight
changes: no cross terms, no padding, for any mix of ranks. The server sends the stack down;
every client adds ``s B_stack A_stack`` to its frozen weights (``s`` the common LoRA scaling)
and starts the next round from a freshly initialised adapter of its own rank (``A`` random,
``B = 0``). The stack grows with the number of clients, so it does not fit the fixed-rank
global adapter: this strategy keeps

* :attr:`FLoRA.last_stack`: the round's stacked factors, sent by :meth:`FLoRA.downlink` for the
  client to merge (``s B A`` added to the frozen weight the LoRA module wraps);
* :attr:`FLoRA.base_delta`: the sum over rounds of the merged products per module, the change
  of the frozen weights so far (for the global evaluation model, a late client, and resume);

and returns as global state the re-initialised adapter (``A`` PEFT's Kaiming-uniform draw,
seeded by ``(seed, round)``, ``B = 0``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightning_fed.state import StateDict, compute_dtype
from lightning_fed.strategies.base import ClientUpdate
from lightning_fed.strategies.heterogeneous_rank import HeterogeneousRankLoRA
from lightning_fed.strategies.lora_factors import lora_pairs

#: Downlink key prefix of the stacked factors (``"flora/stack/<A or B key>"``).
STACK_PREFIX = "flora/stack/"


def stack_factors(states: Sequence[Mapping[str, Tensor]], weights: Sequence[float]) -> dict[str, tuple[Tensor, Tensor]]:
    """Per LoRA module, ``(A_stack, B_stack)`` with ``B_stack A_stack = sum_k p_k B_k A_k``.

    ``A_stack`` is ``(sum r_k, in)``: the clients' ``p_k A_k`` one under the other, in order;
    ``B_stack`` is ``(out, sum r_k)``: their ``B_k`` side by side. ``p_k = w_k / sum_j w_j``.
    """
    total = float(sum(weights))
    out: dict[str, tuple[Tensor, Tensor]] = {}
    for module, (a_key, b_key) in lora_pairs(states[0]).items():
        a_stack = torch.cat(
            [s[a_key].to(compute_dtype(s[a_key].dtype)) * (float(w) / total) for s, w in zip(states, weights)]
        )
        b_stack = torch.cat([s[b_key].to(compute_dtype(s[b_key].dtype)) for s in states], dim=1)
        out[module] = (a_stack, b_stack)
    return out


def fresh_lora_a(shape: torch.Size, generator: torch.Generator) -> Tensor:
    """PEFT's default ``lora_A`` init: ``kaiming_uniform_(a=sqrt(5))``, i.e. ``U(-1/sqrt(in), 1/sqrt(in))``."""
    bound = 1.0 / math.sqrt(shape[1])
    return (torch.rand(shape, generator=generator) * 2.0 - 1.0) * bound


class FLoRA(HeterogeneousRankLoRA):
    """Stack the clients' LoRA factors (exact aggregate), merge it into the base, restart the adapters.

    Args:
        client_ranks: Each client's rank (see :class:`HeterogeneousRankLoRA`).
        weighting: ``"num_examples"`` (the paper's ``n_k / n``) or ``"uniform"``.
        seed: Seed of the re-initialised ``A`` factors (per round).
    """

    def __init__(
        self, client_ranks: Sequence[int] | None = None, weighting: str = "num_examples", seed: int = 0
    ) -> None:
        super().__init__(client_ranks, weighting)
        self.seed = int(seed)
        self.rounds_done = 0
        self.last_stack: StateDict = {}
        self.base_delta: dict[str, Tensor] = {}

    def downlink(self, client_id: int) -> StateDict:
        """The last round's stacked factors (``flora/stack/<key>``), for the client to merge into its base."""
        return {STACK_PREFIX + k: v for k, v in self.last_stack.items()}

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        self.check_ranks(global_state, updates)
        pairs = lora_pairs(global_state)
        stacks = stack_factors([u.state for u in updates], self.weights(updates))
        self.last_stack = {}
        for module, (a_stack, b_stack) in stacks.items():
            a_key, b_key = pairs[module]
            self.last_stack[a_key], self.last_stack[b_key] = a_stack, b_stack
            merged = b_stack @ a_stack  # = sum_k p_k B_k A_k exactly
            self.base_delta[module] = merged if module not in self.base_delta else self.base_delta[module] + merged
        out = self.average_other_keys(global_state, updates)
        seed = int(np.random.SeedSequence([self.seed, self.rounds_done]).generate_state(1)[0])
        g = torch.Generator().manual_seed(seed)
        for a_key, b_key in pairs.values():  # a fresh adapter: A drawn, B zero, so B A = 0
            out[a_key] = fresh_lora_a(global_state[a_key].shape, g).to(global_state[a_key].dtype)
            out[b_key] = torch.zeros_like(global_state[b_key])
        self.rounds_done += 1
        return {k: out[k] for k in global_state}

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "seed": self.seed,
            "rounds_done": self.rounds_done,
            "last_stack": {k: v.clone() for k, v in self.last_stack.items()},
            "base_delta": {k: v.clone() for k, v in self.base_delta.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.seed = int(state.get("seed", self.seed))
        self.rounds_done = int(state.get("rounds_done", self.rounds_done))
        self.last_stack = {k: v.clone() for k, v in state.get("last_stack", {}).items()}
        self.base_delta = {k: v.clone() for k, v in state.get("base_delta", {}).items()}
