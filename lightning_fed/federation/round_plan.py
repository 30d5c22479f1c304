"""The plan of one round: which clients train, how many batches each, and what each was told.

The server's half decides a round's plan once, at the round's boundary (sampling, the hooks'
queries and replies, round-start work, each client's instructions and ``prepare_client``);
the data module only lays the plan's turns out as the round's batches
(:meth:`~lightning_fed.datamodules.FederatedDataModule.connect`). The in-process
:class:`~lightning_fed.callbacks.FederatedLoop` is the planner of a simulation; a Flower client
is connected to the one-turn plan of the message it answers (:class:`FixedPlan`).

Why the data module asks its planner instead of being handed a plan: in Lightning's fit loop the
round's loader is requested after the previous round's checkpoint is written and before
``on_train_epoch_start``, with no callback hook in between. Planning earlier (e.g. in
``on_train_epoch_end``) would put the next round's hook state into the previous round's
checkpoint; planning later is too late for the loader. So that request is the round boundary,
and the planner, not Lightning's epoch counter, says which round it is (the server's next round).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lightning_fed.federation.secret_seed import SecretSeed
from lightning_fed.federation.turn import TurnPlan


@dataclass(frozen=True)
class GroupPlan:
    """Turns that train together (``federation.batch_clients``): each of the group's batches
    concatenates one batch of every turn; all its turns have the same number of batches."""

    turns: tuple[TurnPlan, ...]

    @property
    def num_batches(self) -> int:
        return self.turns[0].num_batches


@dataclass(frozen=True)
class RoundPlan:
    """One round as decided on the server, before any local step.

    Attributes:
        round_idx: The round (0-based).
        sampled: The clients sampled for the round (before hooks left any out).
        turns: The clients that train, in batch order, each with its number of batches.
        instructions: Client -> the hooks' payloads for it (by hook index; empty ones left out).
        batch_seed: The secret seed of Poisson batches (a DP-SGD module's
            :func:`poisson_batch_seed`); ``None``: shuffled passes seeded by the run's ``seed``.
        groups: ``turns`` cut into groups that train together (``federation.batch_clients``);
            empty: one turn after another.
    """

    round_idx: int
    sampled: tuple[int, ...]
    turns: tuple[TurnPlan, ...]
    instructions: Mapping[int, Mapping[int, Any]] = field(default_factory=dict)
    batch_seed: SecretSeed | None = None
    groups: tuple[tuple[TurnPlan, ...], ...] = ()

    @property
    def units(self) -> tuple[TurnPlan | GroupPlan, ...]:
        """What trains, in batch order: a turn, or a :class:`GroupPlan` of turns trained together."""
        if not self.groups:
            return self.turns
        return tuple(g[0] if len(g) == 1 else GroupPlan(tuple(g)) for g in self.groups)

    @property
    def clients(self) -> list[int]:
        """The clients that train this round, in batch order."""
        return [t.client_id for t in self.turns]

    @property
    def num_batches(self) -> int:
        """Batches of the whole round (the round's Lightning epoch)."""
        return sum(u.num_batches for u in self.units)


def poisson_batch_seed(module: Any, round_idx: int) -> SecretSeed | None:
    """The secret seed of a round's Poisson batches when ``module`` trains with DP-SGD (its
    ``poisson_batch_seed``, from the run's secret: the accountant's amplification by ``B / |D_k|``
    assumes batches nobody can recompute); ``None`` for any other module."""
    seed_of = getattr(module, "poisson_batch_seed", None)
    return seed_of(round_idx) if callable(seed_of) else None


class RoundPlanner(Protocol):
    """What a data module is connected to: the source of the round it lays out next."""

    def next_round(self) -> RoundPlan:
        """The plan of the round about to train (decided once; asking again returns the same plan)."""
        ...


@dataclass(frozen=True)
class FixedPlan:
    """A planner that always answers the same plan (a Flower client's single turn, a test)."""

    plan: RoundPlan

    def next_round(self) -> RoundPlan:
        return self.plan
