"""Batch samplers that lay a federated round out as one stream of batches.

A round is one Lightning epoch: the sampled clients train one after the other, each on its
own batches, and the :class:`~lightning_fed.callbacks.FederatedLoop` swaps client state at
the boundaries. Every training batch holds examples of a single client; evaluation batches
may pack several clients' examples (:class:`ClientBatchSampler`).

A DP-SGD run draws each step's batch by Poisson sampling (``poisson_seed``): every example of
the client independently with probability ``B / |D_k|``, from a secret seed, which is the
sampling the example-level accountant's amplification assumes (Opacus'
``UniformWithReplacementSampler``). Such a batch may be empty: :class:`EmptyBatchCollate` then
hands the module ``{EMPTY_BATCH: ...}``, on which DP-SGD's step is the noise alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Sampler

from lightning_fed.federation.sampling import derive_seed
from lightning_fed.federation.secret_seed import SecretSeed, as_secret_seed, uniform
from lightning_fed.federation.turn import TurnPlan

#: The key of the batch a Poisson draw left empty (:class:`EmptyBatchCollate`).
EMPTY_BATCH = "empty_batch"


class RoundBatchSampler(Sampler[list[int]]):
    """Yields ``turn.num_batches`` batches of ``batch_size`` for each turn, in order.

    A client's examples are visited in a fresh permutation per pass, seeded by
    ``(seed, round, client)``; passes continue across batch boundaries, so every batch is full
    unless the client holds fewer than ``batch_size`` examples.

    Under data parallelism (DDP, ``num_replicas`` processes) one local step of a client uses
    ``num_replicas * batch_size`` examples: the same stream is cut into global batches of that
    size and process ``rank`` takes every ``num_replicas``-th example of each. The gradient
    DDP averages is then the gradient of the single-process run with the global batch size.

    With ``poisson_seed`` (a DP-SGD run; one process) each of a turn's batches is instead a
    Poisson sample of the client's examples at rate ``min(1, batch_size / |D_k|)``, drawn from
    ``(poisson_seed, round, client)``: batches of varying size, possibly empty.

    ``groups`` (turns trained together, ``federation.batch_clients``): each batch of a group is
    one batch of each of its turns, concatenated; every client keeps its own order.
    """

    def __init__(
        self,
        turns: Sequence[TurnPlan],
        offsets: Sequence[int],
        sizes: Sequence[int],
        batch_size: int,
        seed: int,
        round_idx: int,
        rank: int = 0,
        num_replicas: int = 1,
        poisson_seed: SecretSeed | int | None = None,
        groups: Sequence[Sequence[TurnPlan]] = (),
    ) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
        if poisson_seed is not None and num_replicas != 1:
            raise ValueError(f"Poisson batches (DP-SGD) need one process, got {num_replicas}")
        small = [t.client_id for t in turns if min(sizes[t.client_id], batch_size * num_replicas) < num_replicas]
        if small:
            raise ValueError(f"clients {small} hold fewer examples than the {num_replicas} data-parallel processes")
        self.turns, self.offsets, self.sizes = list(turns), offsets, sizes
        self.batch_size, self.seed, self.round_idx = batch_size, seed, round_idx
        self.rank, self.num_replicas = rank, num_replicas
        self.poisson_seed = poisson_seed
        if groups and (poisson_seed is not None or num_replicas != 1):
            raise ValueError("turns trained together (federation.batch_clients) need one process and shuffled batches")
        self.groups = [list(g) for g in groups] or [[t] for t in self.turns]

    def __len__(self) -> int:
        # A round with no turn (Poisson sampling drew no client) is an epoch without batches;
        # Lightning ends the whole fit on a loader of length 0, so it is told 1 and gets none.
        return sum(g[0].num_batches for g in self.groups) or 1

    def __iter__(self) -> Iterator[list[int]]:
        if self.poisson_seed is not None:
            yield from self._poisson()
            return
        for group in self.groups:  # a group's batch: one batch of each of its turns, concatenated
            for batches in zip(*(self._turn_batches(turn) for turn in group)):
                yield [i for batch in batches for i in batch]

    def _turn_batches(self, turn: TurnPlan) -> Iterator[list[int]]:
        """One turn's batches, in the order its sequential turn takes them."""
        n, base = self.sizes[turn.client_id], self.offsets[turn.client_id]
        g = torch.Generator().manual_seed(derive_seed(self.seed, self.round_idx, turn.client_id))
        stream: list[int] = []
        bs = min(self.batch_size * self.num_replicas, n)
        for _ in range(turn.num_batches):
            while len(stream) < bs:
                stream.extend((torch.randperm(n, generator=g) + base).tolist())
            yield stream[:bs][self.rank :: self.num_replicas]
            stream = stream[bs:]

    def _poisson(self) -> Iterator[list[int]]:
        """Each batch: every example of the client with probability ``min(1, B / |D_k|)``."""
        for turn in self.turns:
            n, base = self.sizes[turn.client_id], self.offsets[turn.client_id]
            g = as_secret_seed(self.poisson_seed).generator("poisson batch", self.round_idx, turn.client_id)
            rate = min(1.0, self.batch_size / n) if n else 0.0
            for _ in range(turn.num_batches):
                drawn = uniform(n, g) < rate
                yield (torch.nonzero(drawn).flatten() + base).tolist()


class EmptyBatchCollate:
    """``collate``, except that an empty Poisson batch becomes ``{EMPTY_BATCH: tensor([])}``
    (a DP-SGD step on no example still adds its noise)."""

    def __init__(self, collate: Callable[[list[Any]], Any]) -> None:
        self.collate = collate

    def __call__(self, items: list[Any]) -> Any:
        return self.collate(items) if items else {EMPTY_BATCH: torch.zeros(0, dtype=torch.long)}


class ClientBatchSampler(Sampler[list[int]]):
    """Sequential batches over the given clients' examples, in client order.

    By default a batch never mixes two clients (a client's personal state is swapped in per
    batch). ``packed=True`` cuts the clients' examples, concatenated, into batches of
    ``batch_size`` regardless of client boundaries: ``ceil(total / batch_size)`` batches instead
    of one or more per client, for a module that evaluates every client with the same model;
    the metrics are split back per client by each example's ``client_id``.
    """

    def __init__(
        self,
        clients: Sequence[int],
        offsets: Sequence[int],
        sizes: Sequence[int],
        batch_size: int,
        packed: bool = False,
    ) -> None:
        self.clients, self.offsets, self.sizes, self.batch_size = list(clients), offsets, sizes, batch_size
        self.packed = packed

    def __len__(self) -> int:
        if self.packed:
            return -(-sum(self.sizes[c] for c in self.clients) // self.batch_size)
        return sum(-(-self.sizes[c] // self.batch_size) for c in self.clients)

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for c in self.clients:
            idx = range(self.offsets[c], self.offsets[c] + self.sizes[c])
            if not self.packed:
                for start in range(0, len(idx), self.batch_size):
                    yield list(idx[start : start + self.batch_size])
                continue
            for i in idx:
                batch.append(i)
                if len(batch) == self.batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch
