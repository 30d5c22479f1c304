"""The serving half of :class:`~lightning_fed.datamodules.FederatedDataModule`: per-round loaders.

Once the data module has built one :class:`~lightning_fed.datamodules.ClientData` per client,
a round's loader lays the sampled clients' local batches out as one Lightning epoch
(:class:`~lightning_fed.datamodules.RoundBatchSampler`), and an evaluation loader serves the
planned clients' rows (:class:`~lightning_fed.datamodules.ClientBatchSampler`), both in O(clients
of the round), not O(N): sizes and offsets are kept between rounds and follow a selection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
from torch.utils.data import DataLoader, Dataset

from lightning_fed.datamodules.client_data import ClientData, ClientSetView
from lightning_fed.datamodules.round_sampler import ClientBatchSampler, RoundBatchSampler
from lightning_fed.federation.round_plan import RoundPlan, RoundPlanner


class RoundServing(pl.LightningDataModule):
    """Client queries and the round/evaluation loaders (see the module docstring).

    The data module sets ``clients``, ``batch_size``, ``eval_batch_size``, ``num_clients``,
    ``seed``, ``test_dataset`` and ``_collate`` in its ``__init__``/``setup``; the federated
    loop connects itself as the round planner (:meth:`connect`) and sets ``eval_plan``
    (-> planned clients, packed).
    """

    clients: list[ClientData]
    batch_size: int
    eval_batch_size: int
    num_clients: int
    seed: int
    test_dataset: str | None
    planner: RoundPlanner | None
    plan: RoundPlan | None
    eval_plan: Any
    _collate: Any
    _sizes: list[int] | None
    _train_offsets: list[int] | None

    @property
    def client_sizes(self) -> list[int]:
        """``|D_k|``: the number of local training examples of every client (after selection).

        Read per client per round: kept between calls (O(1)) and updated by
        :meth:`ClientData.select`; a caller must not modify the list it gets.
        """
        if self._sizes is None or len(self._sizes) != len(self.clients):
            self._sizes = [len(c.train_set) for c in self.clients]
        return self._sizes

    def _selected(self, client_id: int) -> None:
        """``ClientData.select`` changed a client's training set: a new sizes list (lists handed
        out before, e.g. the report's initial sizes, keep their values); offsets follow lazily."""
        if self._sizes is not None and len(self._sizes) == len(self.clients):
            sizes = list(self._sizes)
            sizes[client_id] = len(self.clients[client_id].train_set)
            self._sizes = sizes
        self._train_offsets = None

    def _round_offsets(self) -> list[int]:
        """:meth:`_offsets` of :attr:`client_sizes`, kept until a selection changes a size."""
        if self._train_offsets is None or len(self._train_offsets) != len(self.clients):
            self._train_offsets = self._offsets(self.client_sizes)
        return self._train_offsets

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
    def connect(self, planner: RoundPlanner) -> None:
        """Serve the rounds ``planner`` decides (see :mod:`~lightning_fed.federation.round_plan`)."""
        self.planner = planner

    def train_dataloader(self) -> DataLoader:
        """The batches of the planner's next round: its turns, one client after another."""
        if self.planner is None:
            raise RuntimeError("FederatedDataModule needs a FederatedLoop callback on the Trainer to plan rounds")
        self.plan = plan = self.planner.next_round()  # planned first: round-start hooks may select client data
        sizes, offsets = self.client_sizes, self._round_offsets()
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer is not None else (0, 1)
        sampler = RoundBatchSampler(plan.turns, offsets, sizes, self.batch_size, self.seed, plan.round_idx, rank, world)
        # The round's clients' sets as they are now (a round hook may have selected a subset of a
        # client's data), indexed as a concatenation of all clients' sets: O(clients per round).
        train = ClientSetView({c: self.clients[c].train_set for c in plan.clients}, offsets)
        return DataLoader(train, batch_sampler=sampler, collate_fn=self._collate)

    def _require_test_set(self) -> None:
        if self.test_dataset is None:
            raise ValueError(
                "data.test_dataset is not set: `test` scores a separate test set;"
                " pass --data.init_args.test_dataset=<file>"
            )

    def _eval_loader(self, sets: list[Dataset]) -> DataLoader:
        """The planned clients' rows (``federation.eval_clients``), in client order, in batches of
        ``eval_batch_size`` that pack several clients when the loop allows it."""
        planned, packed = self.eval_plan() if self.eval_plan is not None else (range(self.num_clients), False)
        # Only the planned clients' sets are measured and indexed: O(planned clients), not O(N).
        clients = [c for c in planned if len(sets[c]) > 0]
        sizes = {c: len(sets[c]) for c in clients}
        offsets = dict(zip(clients, self._offsets([sizes[c] for c in clients])))
        sampler = ClientBatchSampler(clients, offsets, sizes, self.eval_batch_size, packed)
        view = ClientSetView({c: sets[c] for c in clients}, offsets)
        return DataLoader(view, batch_sampler=sampler, collate_fn=self._collate)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader([c.val_set for c in self.clients])

    def test_dataloader(self) -> DataLoader:
        """The planned clients' rows of ``test_dataset``, one client after another (as validation)."""
        self._require_test_set()
        return self._eval_loader([c.test_set for c in self.clients])
