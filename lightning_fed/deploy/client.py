"""One client's turn on its own machine, through the same Lightning path as the simulation.

:class:`ClientLoop` is a :class:`~lightning_fed.callbacks.FederatedLoop` that plays a single
client of a single round: it starts from the state the server sent instead of its own global
state, and hands back the client's :class:`~lightning_fed.strategies.ClientUpdate` instead of
aggregating. Everything in between (loading the start and personal state, clearing the
optimizer, seeding by ``(seed, round, client)``, the round's batches, the strategy's
:class:`~lightning_fed.strategies.LocalCorrection`, what is uploaded) is the parent's code,
which is why a Flower run and an in-process run of the same config reach the same state.

:class:`ClientRunner` owns the module and the data of one machine and runs a fresh
Lightning ``Trainer`` per round, positioned at the round's epoch so that round-dependent
schedules (FedPDPO's ``w_r``) see the right round.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lightning_fed.callbacks.federated_loop import FederatedLoop
from lightning_fed.callbacks.reporting import RoundReport
from lightning_fed.datamodules.federated import FederatedDataModule
from lightning_fed.federation.sampling import ClientTurn
from lightning_fed.modules.base import FederatedModule
from lightning_fed.state import StateDict
from lightning_fed.strategies.base import ClientUpdate

# Trainer settings a client takes from the run's config; the rest (loggers, checkpoints,
# progress bars, validation) is the server's business.
CLIENT_TRAINER_KEYS = (
    "accelerator",
    "precision",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "deterministic",
)


class ClientLoop(FederatedLoop):
    """A :class:`FederatedLoop` for one remote client's turn (see the module docstring)."""

    def __init__(self, like: FederatedLoop) -> None:
        super().__init__(
            rounds=1,
            clients_per_round=1,
            local_steps=like.local_steps,
            local_epochs=like.local_epochs,
            strategy=like.strategy,
            hooks=like.hooks,
            seed=like.seed,
            isolate_failures=False,
            save_adapter=False,
        )
        # The run's length, for round schedules (FedPDPO's w_r, RoundLRSchedule's cosine); the
        # Trainer is stopped after this one round by `setup` (max_epochs = round + 1).
        self.rounds = like.rounds
        self.round_idx, self.client_id = 0, 0
        self.received: StateDict = {}
        self.downlink: StateDict = {}
        self.update: ClientUpdate | None = None

    def assign(
        self, round_idx: int, client_id: int, state: StateDict, downlink: StateDict, entry: dict[str, StateDict]
    ) -> None:
        """Set up the next turn: ``client_id`` trains in ``round_idx`` from ``state``."""
        self.round_idx, self.client_id, self.received, self.downlink = round_idx, client_id, state, downlink
        self.store.load_state_dict({client_id: entry})
        self.update = None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        initial = self.__dict__.get("_initial_personal")
        super().setup(trainer, pl_module, stage)
        trainer.fit_loop.max_epochs = self.round_idx + 1  # the Trainer stands at this round's epoch
        self.global_state = self.received
        if initial is not None:  # the module now holds the last client's personal state
            self._initial_personal = initial

    @override
    def plan_round(self, round_idx: int) -> list[ClientTurn]:
        # Round-start hooks run on the server; a remote client trains the turn it was given.
        return [ClientTurn(self.client_id, self._num_batches(self.client_id))]

    @override
    def client_start(self, client_id: int) -> tuple[StateDict, StateDict]:
        return self.received, self.downlink

    @override
    def _aggregate(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.update = self._updates[0] if self._updates else None
        self._updates, self._received = [], {}

    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pass

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pass

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        pass


class _EvalCollector(pl.Callback):
    """Averages the per-example validation outputs of one client."""

    def __init__(self) -> None:
        self.report = RoundReport()
        self.report.start_eval()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:  # noqa: ANN001
        if isinstance(outputs, dict) and "client_id" in batch:
            self.report.add_eval(batch["client_id"], outputs)


class ClientRunner:
    """Trains and evaluates the clients a machine holds, one turn at a time.

    Args:
        module: The local objective (its backbone stays loaded between rounds).
        datamodule: The federated data; this machine uses only its clients' part.
        loop: The run's :class:`FederatedLoop` (local steps, strategy, seed, hooks).
        trainer_kwargs: Extra ``Trainer`` arguments for local training (precision...).
    """

    def __init__(
        self,
        module: FederatedModule,
        datamodule: FederatedDataModule,
        loop: FederatedLoop,
        trainer_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.module, self.datamodule = module, datamodule
        self.loop = ClientLoop(loop)
        self.trainer_kwargs = {
            k: v for k, v in (trainer_kwargs or {}).items() if k in CLIENT_TRAINER_KEYS and v is not None
        }
        if getattr(datamodule, "tokenizer", None) is None:
            datamodule.tokenizer = module.tokenizer
        datamodule.setup("fit")

    def _trainer(self, round_idx: int, callbacks: list[pl.Callback]) -> pl.Trainer:
        trainer = pl.Trainer(
            devices=1,
            max_epochs=round_idx + 1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            callbacks=callbacks,
            **self.trainer_kwargs,
        )
        # A fresh Trainer starts at epoch 0; put it at the round so `current_epoch` (seeds,
        # round schedules) is the same as in the simulation.
        progress = trainer.fit_loop.epoch_progress
        for counter in (progress.current, progress.total):
            counter.ready = counter.started = counter.processed = counter.completed = round_idx
        return trainer

    def train(
        self, round_idx: int, client_id: int, state: StateDict, downlink: StateDict, entry: dict[str, StateDict]
    ) -> tuple[ClientUpdate, dict[str, StateDict]]:
        """Local training of ``client_id`` in round ``round_idx`` (0-based) from ``state``.

        ``entry`` is what the client kept from earlier rounds (``{"personal", "memory"}``);
        returns the update to upload and the entry to keep.
        """
        self._check_client(client_id)
        self.loop.assign(round_idx, client_id, state, downlink, entry)
        self._trainer(round_idx, [self.loop]).fit(self.module, datamodule=self.datamodule)
        if self.loop.update is None:
            raise RuntimeError(f"client {client_id} produced no update in round {round_idx + 1}")
        return self.loop.update, self.loop.store.get(client_id)

    @torch.no_grad()
    def evaluate(self, client_id: int, state: StateDict, entry: dict[str, StateDict]) -> tuple[dict[str, float], int]:
        """The per-example means of the module's validation metrics on the client's val split."""
        self._check_client(client_id)
        self.module.load_state(state)
        if entry.get("personal"):
            self.module.load_state(entry["personal"])
        data = self.datamodule.client(client_id)
        if len(data.val_set) == 0:
            return {}, 0
        collector = _EvalCollector()
        trainer = pl.Trainer(
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[collector],
            **self.trainer_kwargs,
        )
        trainer.validate(self.module, dataloaders=data.val_dataloader(), verbose=False)
        sums, count = collector.report._sums.get(client_id, {}), collector.report._counts.get(client_id, 0)
        return {k: v / count for k, v in sums.items()} if count else {}, count

    def _check_client(self, client_id: int) -> None:
        if not 0 <= client_id < self.datamodule.num_clients:
            raise ValueError(f"client-id must be in [0, {self.datamodule.num_clients}), got {client_id}")
