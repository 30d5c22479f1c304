"""Client sampling and per-round randomness, as pure functions of (seed, round, client).

Deriving every random choice from these integers (instead of a global RNG that advances
through the run) is what makes a resumed run identical to an uninterrupted one.
"""

from __future__ import annotations

import numpy as np
import torch


def derive_seed(*parts: int) -> int:
    """A 63-bit seed that depends only on ``parts`` (stable across processes and versions)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, dtype=np.uint32) @ [1 << 31, 1])


def check_clients_per_round(clients_per_round: int, num_clients: int) -> None:
    """The one validation of ``federation.clients_per_round`` against ``data.num_clients``."""
    if clients_per_round > num_clients:
        raise ValueError(f"federation.clients_per_round={clients_per_round} exceeds data.num_clients={num_clients}")


def sample_clients(num_clients: int, clients_per_round: int, seed: int, round_idx: int) -> list[int]:
    """Uniform sampling without replacement of ``clients_per_round`` clients, sorted."""
    check_clients_per_round(clients_per_round, num_clients)
    g = torch.Generator().manual_seed(derive_seed(seed, round_idx))
    return sorted(torch.randperm(num_clients, generator=g)[:clients_per_round].tolist())
