"""Client sampling and per-round randomness, as pure functions of (seed, round, client).

Deriving every random choice from these integers (instead of a global RNG that advances
through the run) is what makes a resumed run identical to an uninterrupted one.

Two samplers, each with the accounting that matches it
(:mod:`lightning_fed.privacy.accountant`):

* ``fixed_size`` (:func:`sample_clients`): exactly ``clients_per_round`` clients, uniformly
  without replacement;
* ``poisson`` (:func:`poisson_sample_clients`): every client independently with probability
  ``q``, so the round's size is Binomial(N, q). This is the sampling under which the
  subsampled-Gaussian accountants (Opacus RDP/PRV) amplify privacy by ``q``.

A private run samples from its secret: ``seed`` is then a
:class:`~lightning_fed.federation.secret_seed.SecretSeed`, whose draws are keyed by all of its 256
bits; an integer ``seed`` (a run without DP) draws from torch's generator, as before.
"""

from __future__ import annotations

import numpy as np
import torch

from lightning_fed.data_cross_rules import clients_per_round_problem
from lightning_fed.federation.secret_seed import SecretSeed, permutation, uniform
from lightning_fed.run_options import SAMPLINGS  # noqa: F401 - declared with the run's options

_POISSON_TAG = 0x5053  # keeps the Poisson draws apart from the fixed-size ones of the same round


def derive_seed(*parts: int) -> int:
    """A 63-bit seed that depends only on ``parts`` (stable across processes and versions)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, dtype=np.uint32) @ [1 << 31, 1])


def check_clients_per_round(clients_per_round: int, num_clients: int) -> None:
    """The one validation of ``federation.clients_per_round`` against ``data.num_clients``."""
    if problem := clients_per_round_problem(clients_per_round, num_clients):  # the precheck's line too
        raise ValueError(problem)


def sample_clients(num_clients: int, clients_per_round: int, seed: int | SecretSeed, round_idx: int) -> list[int]:
    """Uniform sampling without replacement of ``clients_per_round`` clients, sorted."""
    check_clients_per_round(clients_per_round, num_clients)
    if isinstance(seed, SecretSeed):  # a private run: keyed by the whole secret
        order = permutation(num_clients, seed.generator("fixed-size sample", round_idx))
    else:
        order = torch.randperm(num_clients, generator=torch.Generator().manual_seed(derive_seed(seed, round_idx)))
    return sorted(order[:clients_per_round].tolist())


def check_sampling_rate(rate: float) -> None:
    """The one validation of a Poisson sampling rate ``q``."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"federation.sampling_rate must be in (0, 1], got {rate!r}")


def poisson_sample_clients(num_clients: int, rate: float, seed: int | SecretSeed, round_idx: int) -> list[int]:
    """Each client independently with probability ``rate`` (Poisson sampling), sorted; may be empty."""
    check_sampling_rate(rate)
    if isinstance(seed, SecretSeed):  # a private run: keyed by the whole secret
        draws = uniform(num_clients, seed.generator("poisson sample", round_idx))
    else:
        g = torch.Generator().manual_seed(derive_seed(seed, _POISSON_TAG, round_idx))
        draws = torch.rand(num_clients, generator=g, dtype=torch.float64)
    return torch.nonzero(draws < rate).flatten().tolist()


def expected_clients(num_clients: int, sampling: str, clients_per_round: int = 0, rate: float = 0.0) -> float:
    """``m``, the expected round size: ``clients_per_round`` (``fixed_size``) or ``q * N`` (``poisson``)."""
    if sampling == "fixed_size":
        check_clients_per_round(clients_per_round, num_clients)
        return float(clients_per_round)
    if sampling == "poisson":
        check_sampling_rate(rate)
        return rate * num_clients
    raise ValueError(f"federation.sampling must be one of {SAMPLINGS}, got {sampling!r}")
