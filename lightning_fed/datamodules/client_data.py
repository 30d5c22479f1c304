"""One client's local data: its train/val/test sets and loaders, as a DataModule of its own."""

from __future__ import annotations

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
    """One client's local data: what a real client on its own machine would hold."""

    def __init__(
        self,
        client_id: int,
        train: list[dict[str, Any]],
        val: list[dict[str, Any]],
        batch_size: int,
        collate: PadCollator,
        test: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__()
        self.client_id, self.batch_size, self.collate = client_id, batch_size, collate
        self.full_train, self.val_set, self.test_set = train, _ListDataset(val), _ListDataset(test or [])
        self.train_set = _ListDataset(train)

    def select(self, indices: list[int] | None) -> None:
        """Train on ``full_train[i] for i in indices`` only (a coreset); ``None`` restores all."""
        if indices is not None and not indices:
            raise ValueError(f"client {self.client_id}: a selection must keep at least one example")
        self.train_set = _ListDataset(self.full_train if indices is None else [self.full_train[i] for i in indices])

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True, collate_fn=self.collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size, collate_fn=self.collate)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.batch_size, collate_fn=self.collate)
