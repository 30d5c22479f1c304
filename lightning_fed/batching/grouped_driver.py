"""The driver side of batched turns: a round's units are turns or groups of turns.

:class:`GroupedTurns` extends the :class:`~lightning_fed.federation.driver.TurnDriver` so that a
unit of the round's layout may be a :class:`~lightning_fed.federation.round_plan.GroupPlan`: at its
first batch every turn of the group is created (:meth:`GroupedTurns.new_turn`) and begun with what
the server sends it, as one :class:`~lightning_fed.batching.batched_turns.TurnGroup`; each batch,
optimizer step and end of the group goes to that group; every ended turn is handed to
:meth:`~lightning_fed.federation.driver.TurnDriver.end_turn` like a sequential one. A plain
:class:`~lightning_fed.federation.turn.TurnPlan` unit runs as before.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lightning_fed.batching.batched_turns import TurnGroup, warn_fallback
from lightning_fed.batching.fallback import batching_fallback
from lightning_fed.batching.group_retry import client_rows, train_alone
from lightning_fed.batching.group_size import expected_clients
from lightning_fed.federation.driver import TurnDriver
from lightning_fed.federation.round_plan import GroupPlan
from lightning_fed.federation.turn import ClientTurn, TurnPlan
from lightning_fed.run_config import FederationConfig


class GroupedTurns(TurnDriver):
    """A :class:`TurnDriver` whose units may be groups of turns trained together.

    Subclasses provide :meth:`new_turn` and a ``server`` with ``send(client_id)`` (the start
    state and downlink of a client), and set :attr:`group_size` (:meth:`decide_group_size`).
    """

    #: Clients trained together (``federation.batch_clients``); 1: one after another.
    group_size: int = 1

    @abstractmethod
    def new_turn(self, trainer: pl.Trainer, pl_module: pl.LightningModule, plan: TurnPlan) -> ClientTurn:
        """The turn of ``plan``, not begun."""

    def decide_group_size(
        self,
        config: FederationConfig,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        datamodule: Any,
        fits: Callable[[Any, Any, pl.Trainer, int], int],
        recorded: int | None = None,
    ) -> int:
        """``config.batch_clients`` as a number of clients; 1, with the one-line reason, when this run
        cannot train its clients together (:func:`~lightning_fed.batching.fallback.batching_fallback`).
        ``auto`` is ``recorded`` when the run resumed records a K (the K its first part chose: a resume
        trains with it whatever the memory holds now), else ``fits(module, datamodule, trainer,
        clients)``: the largest group the memory holds (the caller's memory model,
        :func:`lightning_fed.planning.group.run_group_size`, which is above this package)."""
        k = config.batch_clients
        if k == "off":
            return 1
        reason = batching_fallback(pl_module, list(getattr(self.run, "hooks", None) or []), trainer)
        if reason is not None:
            warn_fallback(k, reason)
            return 1
        how = ""
        if k == "auto" and recorded is not None:
            k, how = recorded, " (recorded by the run resumed)"
        elif k == "auto":
            clients = expected_clients(
                config.clients_per_round, config.sampling, config.sampling_rate, datamodule.num_clients
            )
            k = fits(pl_module, datamodule, trainer, clients)
        shown = int(k)
        if config.sampling == "fixed_size" and shown > config.clients_per_round:  # a round has no more clients
            shown, how = config.clients_per_round, " (at most clients_per_round)"
        rank_zero_info(f"federation.batch_clients: {config.batch_clients}: clients trained together K = {shown}{how}")
        return int(k)

    def close_group(self, trainer: pl.Trainer) -> None:
        """A group in progress (the run stopped inside it): the module's own shapes and forward again."""
        if isinstance(self.turn, TurnGroup):
            self.turn.close(trainer)
            self.turn = None

    def retry_alone(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, group: TurnGroup, unit: GroupPlan
    ) -> list[ClientTurn]:
        """A step of ``group`` (of ``unit``) raised: each of its clients trains again alone, in slot
        order, from what the server sends it, on its rows of the group's batches
        (:func:`~lightning_fed.batching.group_retry.train_alone`); returns the ended turns (a client
        that raises alone: failed, no update)."""
        group.close(trainer)
        turns = []
        try:
            for plan in unit.turns:
                cid = plan.client_id
                turn = self.new_turn(trainer, pl_module, plan)
                turn.begin(trainer, pl_module, *self.server.send(cid))
                self.turn = turn  # the failure guard leaves out this client only
                train_alone(trainer, pl_module, turn, [client_rows(b, cid) for b in group.batches])
                self.turn = None
                turn.end(trainer, pl_module)
                turns.append(turn)
        finally:
            self.turn = None
        return turns

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A validation inside a group's steps runs on the module's own shapes (:meth:`TurnGroup.set_aside`);
        the group takes its stacked ones back at its next batch (after anything the validation's end
        runs, a checkpoint callback's save among them, which then sees the module's own shapes)."""
        if isinstance(self.turn, TurnGroup) and not self.turn.aside:
            self.turn.set_aside()

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        i, first, _ = self.turn_at(batch_idx)
        unit = self.plans[i]
        if not isinstance(unit, GroupPlan):
            super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
            return
        if first:
            group = TurnGroup([self.new_turn(trainer, pl_module, t) for t in unit.turns], pl_module)
            self.turn = group
            group.begin(trainer, [self.server.send(t.client_id) for t in unit.turns])
        elif self.turn.aside:  # a validation ran since the group's last step
            self.turn.take_back()
        self.turn.start_step(batch)

    @override
    def clip_gradients(
        self, optimizer: Any, gradient_clip_val: float | None, gradient_clip_algorithm: str | None
    ) -> bool:
        """A group's step: each client's gradient clipped on its own (:meth:`TurnGroup.clip_gradients`)."""
        if not isinstance(self.turn, TurnGroup):
            return False
        self.turn.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
        return True

    @override
    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        if isinstance(self.turn, TurnGroup):
            self.turn.before_optimizer_step(optimizer.param_groups[0]["lr"])
        else:
            super().on_before_optimizer_step(trainer, pl_module, optimizer)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        group = self.turn
        if not isinstance(group, TurnGroup):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        group.end_step(outputs, trainer.accumulate_grad_batches)
        if self.turn_at(batch_idx)[2]:
            self.turn = None
            unit = self.plans[self.turn_at(batch_idx)[0]]
            turns = self.retry_alone(trainer, pl_module, group, unit) if group.failed else group.end(trainer)
            for turn in turns:
                self.last_turn = turn
                self.end_turn(trainer, pl_module, turn)
            if batch_idx == self._ends[-1] - 1:
                self.end_round(trainer, pl_module)
