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
            self.train_progress_bar.set_description(f"Round {trainer.current_epoch + 1}/{loop.run.rounds}")

    @override
    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, pl_module)
        loop = self._loop(trainer)
        turn = loop.turn if loop is not None else None
        if turn is not None:
            if not turn.private:  # a private run's sample is secret: its bar names no client
                metrics["client"] = turn.client_id
            metrics["local_step"] = self._local_step(trainer, pl_module, loop)
        return metrics

    @staticmethod
    def _local_step(trainer: pl.Trainer, pl_module: pl.LightningModule, loop: Any) -> int:
        """Local steps of the turn so far, counted as ``federation.local_steps`` counts them.

        One local step is one accumulation window of batches, whatever the module does in it:
        FedPDPO steps two optimizers per batch (personal modules, then LoRA), which the turn's
        optimizer-step count would show as two.
        """
        position, _ = loop.turn_progress(trainer.fit_loop.epoch_loop.batch_idx)
        accumulate = getattr(pl_module, "accumulate_grad_batches", None) or trainer.accumulate_grad_batches
        return position // max(int(accumulate), 1) + 1
