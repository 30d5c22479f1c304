"""One client's local data: its train/val/test sets and loaders, as a DataModule of its own."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
from torch.utils.data import DataLoader, Dataset

from lightning_fed.datamodules.tokenize import PadCollator


class _ListDataset(Dataset):
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


class ClientData(pl.LightningDataModule):
    """One client's local data: what a real client on its own machine would hold.

    ``columns`` holds the raw values of the data set's non-text columns in the client's training
    rows, before tokenization (e.g. a device's ``rank``), one list per column.
    """

    def __init__(
        self,
        client_id: int,
        train: list[dict[str, Any]],
        val: list[dict[str, Any]],
        batch_size: int,
        collate: PadCollator,
        test: list[dict[str, Any]] | None = None,
        on_select: Callable[[int], None] | None = None,
        columns: Mapping[str, list[Any]] | None = None,
    ) -> None:
        super().__init__()
        self.columns: dict[str, list[Any]] = dict(columns or {})
        self.client_id, self.batch_size, self.collate = client_id, batch_size, collate
        self.full_train, self.val_set, self.test_set = train, _ListDataset(val), _ListDataset(test or [])
        self.train_set = _ListDataset(train)
        self.on_select = on_select  # the federated data module's cache of |D_k| listens here

    def select(self, indices: list[int] | None) -> None:
        """Train on ``full_train[i] for i in indices`` only (a coreset); ``None`` restores all."""
        if indices is not None and not indices:
            raise ValueError(f"client {self.client_id}: a selection must keep at least one example")
        self.train_set = _ListDataset(self.full_train if indices is None else [self.full_train[i] for i in indices])
        if self.on_select is not None:
            self.on_select(self.client_id)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, collate_fn=self.collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size, collate_fn=self.collate)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.batch_size, collate_fn=self.collate)


class ClientSetView(Dataset):
    """Some clients' datasets in the index space of a concatenation of all clients' sets.

    Client ``k``'s example ``j`` has index ``offsets[k] + j``, as in a ``ConcatDataset`` over
    every client's set (the indices :class:`~lightning_fed.datamodules.RoundBatchSampler`
    yields), but only the given clients' sets are held: building it costs O(clients given), not
    O(N) as a ``ConcatDataset`` of all N sets does. The round loader gives it the round's
    clients' training sets; an evaluation loader can give it the evaluated clients' sets.
    Indices outside the given clients' ranges raise ``IndexError``.

    Args:
        sets: Client id -> its dataset, for the clients of interest.
        offsets: Index of a client's first example, for (at least) the given clients.
    """

    def __init__(self, sets: Mapping[int, Dataset], offsets: Sequence[int]) -> None:
        self.clients = sorted(sets, key=lambda c: offsets[c])
        self.starts = [offsets[c] for c in self.clients]
        self.sets = [sets[c] for c in self.clients]

    def __len__(self) -> int:
        return sum(len(s) for s in self.sets)

    def __getitem__(self, i: int) -> dict[str, Any]:
        k = bisect.bisect_right(self.starts, i) - 1
        j = i - self.starts[k] if k >= 0 else -1
        if not 0 <= j < len(self.sets[k]):
            raise IndexError(f"index {i} is not in the set of one of the clients {self.clients}")
        return self.sets[k][j]
