"""Round serving for :class:`~lightning_fed.datamodules.FederatedDataModule`: the loaders of rounds
and evaluations.

The data module builds one :class:`~lightning_fed.datamodules.ClientData` per client and hands
them to its :class:`RoundServing` (composition, not a base class: everything it reads is given to
its constructor, to :meth:`RoundServing.serve` or to the call). The serving is connected to a
planner (:meth:`RoundServing.connect`, the round plan of
:mod:`~lightning_fed.federation.round_plan`) and to an evaluation layout
(:attr:`RoundServing.eval_plan`). A round's loader lays the planned clients' local batches out as
one Lightning epoch (:class:`~lightning_fed.datamodules.RoundBatchSampler`), and an evaluation
loader serves the planned clients' rows (:class:`~lightning_fed.datamodules.ClientBatchSampler`),
both in O(clients of the round), not O(N): sizes and offsets are kept between rounds and follow a
selection, and only the planned clients' sets are looked up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch.utils.data import DataLoader, Dataset

from lightning_fed.datamodules.client_data import ClientData, ClientSetView
from lightning_fed.datamodules.round_sampler import ClientBatchSampler, EmptyBatchCollate, RoundBatchSampler
from lightning_fed.federation.round_plan import RoundPlan, RoundPlanner

EvaluationLayout = Callable[[], tuple[Sequence[int], bool]]
"""() -> (clients to evaluate, whether batches may mix clients), e.g. ``FederatedLoop.evaluation_layout``."""


def offsets_of(sizes: Sequence[int]) -> list[int]:
    """Index of each set's first row in a concatenation of sets of ``sizes``."""
    out, total = [], 0
    for s in sizes:
        out.append(total)
        total += s
    return out


class RoundServing:
    """The clients' loaders (see the module docstring).

    Attributes:
        planner: The source of the rounds to lay out (set by :meth:`connect`).
        plan: The round the last training loader laid out.
        eval_plan: The clients an evaluation covers and whether its batches may mix clients;
            ``None`` (no loop): every client, one client per batch.
    """

    def __init__(self) -> None:
        self.clients: list[ClientData] = []
        self.collate: Callable[[list[dict[str, Any]]], Any] | None = None
        self._sizes: list[int] = []
        self._train_offsets: list[int] | None = None
        self.planner: RoundPlanner | None = None
        self.plan: RoundPlan | None = None
        self.eval_plan: EvaluationLayout | None = None

    @property
    def ready(self) -> bool:
        """Whether :meth:`serve` was given the clients."""
        return bool(self.clients)

    def serve(self, clients: Sequence[ClientData], collate: Callable[[list[dict[str, Any]]], Any]) -> None:
        """Serve ``clients`` (one ``ClientData`` per client, in client order) collated by ``collate``;
        their ``on_select`` is set to :meth:`selected` so the kept sizes follow a selection."""
        self.clients, self.collate = list(clients), collate
        self._sizes, self._train_offsets = [len(c.train_set) for c in self.clients], None
        for c in self.clients:
            c.on_select = self.selected

    def connect(self, planner: RoundPlanner) -> None:
        """Serve the rounds ``planner`` decides (see :mod:`~lightning_fed.federation.round_plan`)."""
        self.planner = planner

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

    def train_loader(self, batch_size: int, seed: int, rank: int = 0, world: int = 1) -> DataLoader:
        """The batches of the planner's next round: its turns, one client after another."""
        if self.planner is None:
            raise RuntimeError("FederatedDataModule needs a FederatedLoop callback on the Trainer to plan rounds")
        self.plan = plan = self.planner.next_round()  # planned first: round-start hooks may select client data
        sizes, offsets = self._sizes, self.round_offsets()
        sampler = RoundBatchSampler(
            plan.turns, offsets, sizes, batch_size, seed, plan.round_idx, rank, world, plan.batch_seed, plan.groups
        )
        # The round's clients' sets as they are now (a round hook may have selected a subset of a
        # client's data), indexed as a concatenation of all clients' sets: O(clients per round).
        train = ClientSetView({c: self.clients[c].train_set for c in plan.clients}, offsets)
        collate = self.collate if plan.batch_seed is None else EmptyBatchCollate(self.collate)
        return DataLoader(train, batch_sampler=sampler, collate_fn=collate)

    def eval_loader(self, set_of: Callable[[ClientData], Dataset], batch_size: int) -> DataLoader:
        """The rows of ``set_of(client)`` (e.g. its ``val_set``) of the clients of :attr:`eval_plan`,
        in client order, in batches of ``batch_size`` that pack several clients when it says so."""
        planned, packed = self.eval_plan() if self.eval_plan is not None else (range(len(self.clients)), False)
        # Only the planned clients' sets are looked up, measured and indexed: O(planned clients), not O(N).
        sets = {c: set_of(self.clients[c]) for c in planned}
        clients = [c for c in planned if len(sets[c]) > 0]
        sizes = {c: len(sets[c]) for c in clients}
        offsets = dict(zip(clients, offsets_of([sizes[c] for c in clients])))
        sampler = ClientBatchSampler(clients, offsets, sizes, batch_size, packed)
        view = ClientSetView({c: sets[c] for c in clients}, offsets)
        return DataLoader(view, batch_sampler=sampler, collate_fn=self.collate)
