"""Which clients are evaluated, and after which rounds: one rule for both transports.

Evaluating every client after every round costs O(N) per round (78% of a round at N=1000 in
issue #13). The plan bounds it: ``federation.eval_clients`` picks the clients (``all``, the
round's ``sampled`` clients, or a fixed random ``panel`` of ``eval_panel_size`` clients drawn
once from the run's seed) and ``federation.eval_every`` the rounds (every n-th round and always
the last). The initial evaluation (round 0, before training) follows the same client rule;
``sampled`` then means round 1's clients.

The in-process :class:`~lightning_fed.callbacks.FederatedLoop` and the Flower
:class:`~lightning_fed.deploy.FederatedServer` both ask :meth:`EvaluationPlan.clients` with
their :class:`~lightning_fed.federation.ServerRound`, so the same clients are evaluated.

A module or callback whose evaluation depends on the client beyond its personal parameters
(a per-client selector, a per-client personalized model) sets :data:`PER_CLIENT_ATTR` to
``True``; its evaluation batches then hold one client each instead of packing several.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch

from lightning_fed.federation.sampling import derive_seed
from lightning_fed.run_options import DEFAULT_PANEL_SIZE, EVAL_CLIENTS_CHOICES, evaluation_problems  # noqa: F401

DEFAULT_EVAL_CLIENTS = "panel"
"""``federation.eval_clients`` left unset: a panel during ``fit``; ``validate``/``test`` evaluate all."""
PANEL_SALT = 31  # separates the panel draw from client sampling (derive_seed(seed, round))
PER_CLIENT_ATTR = "evaluates_per_client"
"""Attribute (module or callback) saying that evaluation batches must not mix clients."""


def evaluation_panel(seed: int, num_clients: int, size: int) -> list[int]:
    """A fixed random panel of ``size`` clients, sorted: a pure function of ``(seed, num_clients, size)``.

    ``size >= num_clients`` gives every client.
    """
    if size >= num_clients:
        return list(range(num_clients))
    return list(_drawn_panel(seed, num_clients, size))


@functools.lru_cache(maxsize=8)
def _drawn_panel(seed: int, num_clients: int, size: int) -> tuple[int, ...]:
    # Drawn once per (seed, N, size): a permutation of all N clients at every evaluation is
    # O(N) work each round (0.4 ms at N=10000, benchmarks/scale_clients.py --profile).
    g = torch.Generator().manual_seed(derive_seed(seed, PANEL_SALT, num_clients, size))
    return tuple(sorted(torch.randperm(num_clients, generator=g)[:size].tolist()))


def packs_evaluation(module: Any, personal: bool, callbacks: Iterable[Any] = ()) -> bool:
    """Whether evaluation batches may mix clients: every client is evaluated by the same model.

    Not when the module has ``personal`` state (swapped in per batch), nor when the module or a
    callback says it evaluates per client (:data:`PER_CLIENT_ATTR`).
    """
    return not personal and not any(getattr(x, PER_CLIENT_ATTR, False) for x in (module, *callbacks))


@dataclass(frozen=True)
class EvaluationPlan:
    """The per-round evaluation rule (see the module docstring).

    Args:
        clients: ``all``, ``sampled`` or ``panel``; ``None``: ``panel`` in ``fit`` and all
            clients in a standalone ``validate``/``test``.
        panel_size: Size of the panel (``>= N``: every client).
        every: Evaluate after every ``every``-th round and after the last.
        rounds: Rounds of the run.
    """

    clients: str | None = None
    panel_size: int = DEFAULT_PANEL_SIZE
    every: int = 1
    rounds: int = 1

    def __post_init__(self) -> None:
        if problems := self.problems(self.clients, self.panel_size, self.every):
            raise ValueError("; ".join(problems))

    @staticmethod
    def problems(clients: str | None, panel_size: int, every: int) -> list[str]:
        """Every invalid option, each as a one-line message naming the flag (:func:`evaluation_problems`)."""
        return evaluation_problems(clients, panel_size, every)

    def evaluates(self, round_number: int) -> bool:
        """Whether the evaluation after round ``round_number`` (1-based; 0 = initial) runs."""
        return round_number == 0 or round_number % self.every == 0 or round_number >= self.rounds

    def clients_for(self, server: Any, round_idx: int, standalone: bool = False) -> list[int]:
        """The clients evaluated with round ``round_idx``'s state (0-based: the round just trained,
        or for the initial evaluation round 0, whose clients are the first to train).

        Args:
            server: The run's :class:`~lightning_fed.federation.ServerRound` (bound: it knows
                ``num_clients``, ``seed`` and how it samples).
            round_idx: The round (0-based).
            standalone: A ``validate``/``test`` run: all clients unless ``clients`` was set.
        """
        mode = self.clients or ("all" if standalone else DEFAULT_EVAL_CLIENTS)
        if mode == "sampled":
            return list(server.sample(round_idx))
        if mode == "panel":
            return evaluation_panel(server.seed, server.num_clients, self.panel_size)
        return list(range(server.num_clients))


def take_over_validation(trainer: Any, plan: EvaluationPlan) -> tuple[EvaluationPlan, int | float]:
    """Let ``plan`` decide when a ``fit`` validates; returns the plan and the Trainer's ``limit_val_batches``.

    A round that is not evaluated runs no validation at all: the loop sets ``limit_val_batches``
    to 0 for it (Lightning's switch that turns validation off) and back to the returned value
    otherwise. Lightning's ``check_val_every_n_epoch`` cannot express "and always after the last
    round", so a value other than 1 given there counts as ``federation.eval_every``.
    """
    every = trainer.check_val_every_n_epoch
    if every is not None and every != 1:
        if plan.every not in (1, every):
            raise ValueError(
                f"trainer.check_val_every_n_epoch={every} conflicts with federation.eval_every={plan.every};"
                " set federation.eval_every only"
            )
        plan = replace(plan, every=every)
        trainer.check_val_every_n_epoch = 1
    return plan, trainer.limit_val_batches
