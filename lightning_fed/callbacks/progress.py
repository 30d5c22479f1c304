"""A progress bar per round that names the round, the current client and its local step."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import TQDMProgressBar
from typing_extensions import override


class FederatedProgressBar(TQDMProgressBar):
    """Lightning's TQDM bar, with ``Round r/R`` as description and the client in the postfix."""

    def _loop(self, trainer: pl.Trainer) -> Any:
        from lightning_fed.callbacks.federated_loop import FederatedLoop

        return next((c for c in trainer.callbacks if isinstance(c, FederatedLoop)), None)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, *_: Any) -> None:
        super().on_train_epoch_start(trainer)
        loop = self._loop(trainer)
        if loop is not None:
            self.train_progress_bar.set_description(f"Round {trainer.current_epoch + 1}/{loop.rounds}")

    @override
    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        loop = self._loop(trainer)
        turn = loop.turn if loop is not None else None
        if turn is not None:
            metrics["client"] = turn.client_id
            metrics["local_step"] = turn.steps
        return metrics
