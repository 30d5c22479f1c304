"""The serving part of :class:`~lightning_fed.datamodules.FederatedDataModule`: per-round loaders.

Once the data module has built one :class:`~lightning_fed.datamodules.ClientData` per client, it
hands them to a :class:`RoundServing` (composition, not a base class: everything it reads is
given to its constructor or to the call). A round's loader lays the planned clients' local batches
out as one Lightning epoch (:class:`~lightning_fed.datamodules.RoundBatchSampler`), and an
evaluation loader serves the planned clients' rows
(:class:`~lightning_fed.datamodules.ClientBatchSampler`), both in O(clients of the round), not
O(N): sizes and offsets are kept between rounds and follow a selection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.utils.data import DataLoader, Dataset

from lightning_fed.datamodules.client_data import ClientData, ClientSetView
from lightning_fed.datamodules.round_sampler import ClientBatchSampler, RoundBatchSampler
from lightning_fed.federation.round_plan import RoundPlan


def offsets_of(sizes: Sequence[int]) -> list[int]:
    """Index of each set's first row in a concatenation of sets of ``sizes``."""
    out, total = [], 0
    for s in sizes:
        out.append(total)
        total += s
    return out


class RoundServing:
    """The clients' loaders (see the module docstring).

    Args:
        clients: One ``ClientData`` per client, in client order; their ``on_select`` is set to
            :meth:`selected` so the kept sizes follow a selection.
        collate: Batch collation of every loader.
    """

    def __init__(self, clients: Sequence[ClientData], collate: Callable[[list[dict[str, Any]]], Any]) -> None:
        self.clients, self.collate = list(clients), collate
        self._sizes: list[int] = [len(c.train_set) for c in self.clients]
        self._train_offsets: list[int] | None = None
        for c in self.clients:
            c.on_select = self.selected

    @property
    def client_sizes(self) -> list[int]:
        """``|D_k|``: the number of local training examples of every client (after selection).

        Read per client per round: kept between calls (O(1)) and updated by
        :meth:`ClientData.select`; a caller must not modify the list it gets.
        """
        return self._sizes

    def selected(self, client_id: int) -> None:
        """``ClientData.select`` changed a client's training set: a new sizes list (lists handed
        out before, e.g. the report's initial sizes, keep their values); offsets follow lazily."""
        sizes = list(self._sizes)
        sizes[client_id] = len(self.clients[client_id].train_set)
        self._sizes, self._train_offsets = sizes, None

    def round_offsets(self) -> list[int]:
        """:func:`offsets_of` :attr:`client_sizes`, kept until a selection changes a size."""
        if self._train_offsets is None:
            self._train_offsets = offsets_of(self._sizes)
        return self._train_offsets

    def train_loader(self, plan: RoundPlan, batch_size: int, seed: int, rank: int = 0, world: int = 1) -> DataLoader:
        """The batches of ``plan``: its turns, one client after another."""
        sizes, offsets = self._sizes, self.round_offsets()
        sampler = RoundBatchSampler(plan.turns, offsets, sizes, batch_size, seed, plan.round_idx, rank, world)
        # The round's clients' sets as they are now (a round hook may have selected a subset of a
        # client's data), indexed as a concatenation of all clients' sets: O(clients per round).
        train = ClientSetView({c: self.clients[c].train_set for c in plan.clients}, offsets)
        return DataLoader(train, batch_sampler=sampler, collate_fn=self.collate)

    def eval_loader(
        self, set_of: Callable[[ClientData], Dataset], planned: Sequence[int], batch_size: int, packed: bool
    ) -> DataLoader:
        """The ``planned`` clients' rows of ``set_of(client)`` (e.g. its ``val_set``), in client
        order, in batches of ``batch_size`` that pack several clients when ``packed``."""
        # Only the planned clients' sets are looked up, measured and indexed: O(planned clients), not O(N).
        sets = {c: set_of(self.clients[c]) for c in planned}
        clients = [c for c in planned if len(sets[c]) > 0]
        sizes = {c: len(sets[c]) for c in clients}
        offsets = dict(zip(clients, offsets_of([sizes[c] for c in clients])))
        sampler = ClientBatchSampler(clients, offsets, sizes, batch_size, packed)
        view = ClientSetView({c: sets[c] for c in clients}, offsets)
        return DataLoader(view, batch_sampler=sampler, collate_fn=self.collate)
