"""Evaluate every client on its personalized model, not only with its personal parameters.

The :class:`~lightning_fed.callbacks.FederatedLoop` evaluates the global shared state with
each client's personal parameters swapped in. That covers methods whose personalization is
a set of personal parameters (FedPDPO, FedPer, FedRep). Two baselines personalize
differently: FedAMP gives each client its own aggregate of the shared state
(``Strategy.client_model``), and Per-FedAvg adapts the meta-model with a few steps on the
client's own data before using it. This callback does both, per client, for evaluation only
(fit's validation, ``validate`` and ``test``), and puts the global state back afterwards.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lightning_fed.federation.sampling import derive_seed

ADAPT_SALT = 11  # separates the evaluation-adaptation draws from the training draws


class PersonalizedEvaluation(Callback):
    """At each client's first validation batch: load ``strategy.client_model(client, global)``,
    then call ``module.personalize(client_data, seed)`` if the module defines it (with
    gradients enabled, outside inference mode); restore the global state at the end.

    Put it after the :class:`~lightning_fed.callbacks.FederatedLoop` in ``trainer.callbacks``.
    """

    evaluates_per_client = True  # a model per client: evaluation batches hold one client each

    def __init__(self) -> None:
        self._client: int | None = None

    @staticmethod
    def _loop(trainer: pl.Trainer) -> Any:
        from lightning_fed.federation.driver import find_driver

        loop = find_driver(trainer)
        if loop is None or not hasattr(loop, "server"):
            raise ValueError("PersonalizedEvaluation needs a FederatedLoop in trainer.callbacks")
        return loop

    @override
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._client = None

    @override
    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if "client_id" not in batch:
            return
        cid = int(batch["client_id"][0])
        if cid == self._client:
            return
        loop = self._loop(trainer)
        if not loop.server.global_state:
            return
        pl_module.load_state(loop.run.strategy.client_model(cid, loop.server.global_state))
        personalize = getattr(pl_module, "personalize", None)
        if personalize is not None:
            seed = derive_seed(loop.server.seed, trainer.current_epoch, cid, ADAPT_SALT)
            with torch.inference_mode(False), torch.enable_grad():
                personalize(trainer.datamodule.client(cid), seed)
        self._client = cid

    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loop = self._loop(trainer)
        if self._client is not None and loop.server.global_state:
            pl_module.load_state(loop.server.global_state)
        self._client = None

    # `lightning-fed test`: the same personalization, per client, on the test set.
    @override
    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_validation_epoch_start(trainer, pl_module)

    @override
    def on_test_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.on_validation_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)

    @override
    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.on_validation_epoch_end(trainer, pl_module)
