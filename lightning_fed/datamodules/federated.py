"""The federated data module: load, validate, partition, tokenize, and serve rounds.

Path of the data: ``dataset`` (hub name, local file, or ``synthetic:<name>``) -> records
with canonical fields -> :mod:`~lightning_fed.datamodules.partition` -> one
:class:`ClientData` per client (its own train/val split, a DataModule of its own) -> the
round loader, which lays the sampled clients' local batches out as one Lightning epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
from torch.utils.data import ConcatDataset, DataLoader, Dataset

from lightning_fed.datamodules.partition import ByColumn, IID, Partitioner, check_partition
from lightning_fed.datamodules.round_sampler import ClientBatchSampler, RoundBatchSampler
from lightning_fed.datamodules.sources import load_records
from lightning_fed.datamodules.tokenize import OVERFLOW_CHOICES, Overflow, PadCollator
from lightning_fed.federation.sampling import derive_seed


class _ListDataset(Dataset):
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.items[i]


class ClientData(pl.LightningDataModule):
    """One client's local data: what a real client on its own machine would hold."""

    def __init__(self, client_id: int, train: list[dict[str, Any]], val: list[dict[str, Any]], batch_size: int, collate: PadCollator) -> None:
        super().__init__()
        self.client_id, self.batch_size, self.collate = client_id, batch_size, collate
        self.full_train, self.val_set = train, _ListDataset(val)
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


class FederatedDataModule(pl.LightningDataModule):
    """Partitions one dataset into per-client DataModules and serves federated rounds.

    Subclasses set :attr:`kind` and implement :meth:`encode` (one record -> token fields).

    Args:
        dataset: ``synthetic:<name>``, a local ``.json/.jsonl/.csv/.parquet`` file or folder,
            or a Hugging Face dataset name.
        num_clients: Number of clients to partition the data into.
        partition: How rows are assigned to clients. Default: the dataset's ``client``
            column when it has one (the synthetic sets do), else IID.
        field_map: Canonical field -> column of the source, e.g. ``{"prompt": "question"}``.
        split: Split to load for hub datasets.
        synthetic_args: Keyword arguments of the synthetic generator (``num_clients``
            defaults to this module's).
        batch_size: Local batch size.
        eval_batch_size: Batch size of evaluation (default: ``batch_size``).
        max_length: Maximum tokens of prompt plus response.
        on_overflow: What to do with longer examples: ``error``, ``truncate`` or ``drop``.
        val_fraction: Fraction of each client's rows held out for its evaluation.
        eval_clients: Evaluate on the first this-many clients only (default: all).
        template: Prompt template (see :mod:`~lightning_fed.datamodules.templates`); default
            is the subclass's :attr:`default_template`.
        seed: Seed of the partition and of the train/val split.
    """

    kind: ClassVar[str]
    default_template: ClassVar[str] = "alpaca"

    def __init__(
        self,
        dataset: str,
        num_clients: int = 8,
        partition: Partitioner | None = None,
        field_map: dict[str, str] | None = None,
        split: str = "train",
        synthetic_args: dict[str, Any] | None = None,
        batch_size: int = 8,
        eval_batch_size: int | None = None,
        max_length: int = 256,
        on_overflow: str = "error",
        val_fraction: float = 0.1,
        eval_clients: int | None = None,
        template: str | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        problems = []
        if num_clients < 1:
            problems.append(f"data.num_clients must be >= 1, got {num_clients}")
        if batch_size < 1:
            problems.append(f"data.batch_size must be >= 1, got {batch_size}")
        if max_length < 2:
            problems.append(f"data.max_length must be >= 2, got {max_length}")
        if on_overflow not in OVERFLOW_CHOICES:
            problems.append(f"data.on_overflow must be one of {OVERFLOW_CHOICES}, got {on_overflow!r}")
        if not 0.0 <= val_fraction < 1.0:
            problems.append(f"data.val_fraction must be in [0, 1), got {val_fraction}")
        if eval_clients is not None and not 1 <= eval_clients <= num_clients:
            problems.append(f"data.eval_clients must be in [1, {num_clients}], got {eval_clients}")
        if problems:
            raise ValueError("; ".join(problems))
        self.dataset, self.num_clients, self.partition = dataset, num_clients, partition
        self.field_map, self.split, self.synthetic_args = field_map, split, synthetic_args
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.max_length, self.on_overflow, self.val_fraction = max_length, on_overflow, val_fraction
        self.eval_clients, self.template, self.seed = eval_clients, template or self.default_template, seed
        self.tokenizer: Any = None
        self.clients: list[ClientData] = []
        self.round_plan: Any = None  # set by FederatedLoop: round -> list[ClientTurn]

    # ----------------------------------------------------------------------------- building
    def encode(self, record: dict[str, Any]) -> dict[str, list[int]]:
        """Token fields of one validated record (``input_ids``/``labels`` or chosen/rejected)."""
        raise NotImplementedError  # abstract: implemented by InstructionDataModule / PreferenceDataModule

    def setup(self, stage: str | None = None) -> None:
        if self.clients:
            return
        if self.tokenizer is None:
            if self.trainer is None or not hasattr(self.trainer.lightning_module, "tokenizer"):
                raise ValueError("data: no tokenizer; attach the data module to a Trainer with a lightning_fed module or set `.tokenizer`")
            self.tokenizer = self.trainer.lightning_module.tokenizer
        synthetic_args = dict(self.synthetic_args or {})
        if self.dataset.startswith("synthetic:"):
            synthetic_args.setdefault("num_clients", self.num_clients)
        records = load_records(self.dataset, self.kind, split=self.split, field_map=self.field_map, synthetic_args=synthetic_args)
        partition = self.partition or (ByColumn("client") if "client" in records.column_names else IID())
        parts = partition(records, self.num_clients, self.seed)
        check_partition(parts, self.num_clients, f"{type(partition).__name__} of data.dataset {self.dataset!r}")
        collate = PadCollator(self.tokenizer.pad_token_id)
        rows = records.to_list()
        for cid, indices in enumerate(parts):
            encoded = []
            for i in indices:
                try:
                    item = self.encode(rows[i])
                except Overflow as err:
                    if self.on_overflow == "drop":
                        continue
                    raise ValueError(
                        f"data.max_length: row {i} of {self.dataset!r} (client {cid}) has {err};"
                        " raise data.max_length or set data.on_overflow=truncate|drop"
                    ) from None
                encoded.append({**item, "client_id": cid})
            if not encoded:
                raise ValueError(f"data: client {cid} has no examples left after data.on_overflow={self.on_overflow!r}")
            train, val = self._split(encoded, cid)
            self.clients.append(ClientData(cid, train, val, self.batch_size, collate))
        self._collate = collate

    def _split(self, items: list[dict[str, Any]], cid: int) -> tuple[list, list]:
        n_val = int(round(self.val_fraction * len(items)))
        if self.val_fraction > 0 and len(items) >= 2:
            n_val = max(1, n_val)
        g = torch.Generator().manual_seed(derive_seed(self.seed, cid, 7))
        order = torch.randperm(len(items), generator=g).tolist()
        return [items[i] for i in order[n_val:]], [items[i] for i in order[:n_val]]

    # ------------------------------------------------------------------------------ queries
    @property
    def client_sizes(self) -> list[int]:
        """``|D_k|``: the number of local training examples of every client (after selection)."""
        return [len(c.train_set) for c in self.clients]

    def client(self, client_id: int) -> ClientData:
        """The DataModule of one client."""
        return self.clients[client_id]

    @staticmethod
    def _offsets(sizes: Sequence[int]) -> list[int]:
        out, total = [], 0
        for s in sizes:
            out.append(total)
            total += s
        return out

    # -------------------------------------------------------------------------- dataloaders
    def train_dataloader(self) -> DataLoader:
        if self.round_plan is None:
            raise RuntimeError("FederatedDataModule needs a FederatedLoop callback on the Trainer to plan rounds")
        round_idx = self.trainer.current_epoch if self.trainer is not None else 0
        turns = self.round_plan(round_idx)  # first: round-start hooks may select client data
        sizes = self.client_sizes
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer is not None else (0, 1)
        sampler = RoundBatchSampler(turns, self._offsets(sizes), sizes, self.batch_size, self.seed, round_idx, rank, world)
        # Rebuilt every round: a round hook may have selected a subset of a client's data.
        train = ConcatDataset([c.train_set for c in self.clients])
        return DataLoader(train, batch_sampler=sampler, collate_fn=self._collate)

    def val_dataloader(self) -> DataLoader:
        sizes = [len(c.val_set) for c in self.clients]
        clients = [c for c in range(self.eval_clients or self.num_clients) if sizes[c] > 0]
        sampler = ClientBatchSampler(clients, self._offsets(sizes), sizes, self.eval_batch_size)
        val = ConcatDataset([c.val_set for c in self.clients])
        return DataLoader(val, batch_sampler=sampler, collate_fn=self._collate)
