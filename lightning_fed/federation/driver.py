"""The Lightning side of client turns: a round's batches, one client's turn after another.

:class:`TurnDriver` is the callback base both transports use. A round's batches are the
turns' batches laid out one client after another (:meth:`TurnDriver.lay_out`, read by the
:class:`~lightning_fed.datamodules.RoundBatchSampler`); at a turn's first batch the driver
starts a :class:`~lightning_fed.federation.turn.ClientTurn` (:meth:`TurnDriver.start_turn`),
feeds it every optimizer step and loss, and at its last batch hands its update on
(:meth:`TurnDriver.end_turn`). The in-process :class:`~lightning_fed.callbacks.FederatedLoop`
and the Flower client's :class:`~lightning_fed.deploy.ClientLoop` are its two subclasses.
A module that needs its place in the turn (FedPDPO's phased schedule) asks
:func:`find_driver` instead of importing either.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from itertools import accumulate
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lightning_fed.federation.turn import ClientTurn, TurnPlan
from lightning_fed.run_config import FederationConfig


class TurnDriver(Callback, ABC):
    """Runs the turns of :attr:`plans` over a round's batches (see the module docstring).

    Args:
        run: The run's settings (:class:`~lightning_fed.run.FederatedRun`, or its plain
            :class:`~lightning_fed.run_config.FederationConfig`): what a module reads of the run
            through its driver (``driver.run.rounds``, ``driver.run.local_steps``) and the failure
            guard's ``run.isolate_failures``. The driver keeps no copy of any of them.

    Attributes:
        plans: The current round's turns, in batch order.
        turn: The turn in progress (``None`` between turns).
        last_turn: The last turn that ended.
    """

    def __init__(self, run: FederationConfig) -> None:
        self.run = run
        self.plans: list[TurnPlan] = []
        self._ends: list[int] = []
        self.turn: ClientTurn | None = None
        self.last_turn: ClientTurn | None = None

    def lay_out(self, plans: list[TurnPlan]) -> None:
        """Make ``plans`` the round's turns."""
        self.plans, self._ends = list(plans), list(accumulate(p.num_batches for p in plans))
        self.turn = None

    def turn_at(self, batch_idx: int) -> tuple[int, bool, bool]:
        """(turn index, is first batch of the turn, is last batch of the turn)."""
        for i, end in enumerate(self._ends):
            if batch_idx < end:
                return i, batch_idx == end - self.plans[i].num_batches, batch_idx == end - 1
        raise RuntimeError(
            f"batch {batch_idx} is past the round's planned {self._ends[-1] if self._ends else 0} batches"
        )

    def turn_progress(self, batch_idx: int) -> tuple[int, int]:
        """(position of ``batch_idx`` within its client's turn, number of batches of the turn),
        for a module whose local schedule depends on it (e.g. FedPDPO's phased epochs)."""
        i, _, _ = self.turn_at(batch_idx)
        n = self.plans[i].num_batches
        return batch_idx - (self._ends[i] - n), n

    # ------------------------------------------------------------------ what subclasses do
    @abstractmethod
    def start_turn(self, trainer: pl.Trainer, pl_module: pl.LightningModule, plan: TurnPlan) -> ClientTurn:
        """Create and :meth:`~ClientTurn.begin` the turn of ``plan``."""

    @abstractmethod
    def end_turn(self, trainer: pl.Trainer, pl_module: pl.LightningModule, turn: ClientTurn) -> None:
        """``turn`` has ended: ``turn.update`` is its upload (``None`` if it failed)."""

    def end_round(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """After the round's last turn."""

    # ---------------------------------------------------- gradient clipping (batching's seam)
    def clip_gradients(
        self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None, gradient_clip_algorithm: str | None
    ) -> bool:
        """Clip this step's gradients in place of Lightning's clip (called by the module's
        ``configure_gradient_clipping``, :class:`~lightning_fed.modules.base.FederatedModule`);
        ``False``: not clipped here, the module clips as Lightning does. A group of clients trained
        together clips each client's gradient on its own
        (:class:`~lightning_fed.batching.grouped_driver.GroupedTurns`)."""
        return False

    # ------------------------------------------------------------------ Lightning hooks
    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        i, first, _ = self.turn_at(batch_idx)
        if first:
            self.turn = self.start_turn(trainer, pl_module, self.plans[i])

    @override
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if self.turn is not None:
            self.turn.before_optimizer_step(optimizer.param_groups[0]["lr"])

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        turn = self.turn
        if turn is None:
            return
        turn.after_optimizer_step()
        turn.record_loss(outputs.get("loss") if isinstance(outputs, dict) else outputs)
        if self.turn_at(batch_idx)[2]:
            self.turn, self.last_turn = None, turn
            turn.end(trainer, pl_module)
            self.end_turn(trainer, pl_module, turn)
            if batch_idx == self._ends[-1] - 1:
                self.end_round(trainer, pl_module)


def find_driver(trainer: pl.Trainer | None) -> TurnDriver | None:
    """The trainer's :class:`TurnDriver` (the federated loop or a Flower client's), if any."""
    callbacks = getattr(trainer, "callbacks", None) or []
    return next((c for c in callbacks if isinstance(c, TurnDriver)), None)


__all__ = ["TurnDriver", "find_driver"]
