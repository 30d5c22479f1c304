"""A stop requested inside a round: Lightning validates after that batch, before the round's aggregation.

``trainer.should_stop`` set mid-round (a user's callback, an ``EarlyStopping`` on a training metric
checked per batch) makes Lightning run a validation after the batch (``_should_check_val_fx``), then end
the epoch; the round never closes. On 628d0d2 that validation, of the training client's local model,
was recorded as the round's (``current_epoch + 1``): TensorBoard's ``round/val_loss`` at the unclosed
round's step and Lightning's ``val/loss`` (what a checkpoint's monitor reads). Now it is recorded
nowhere, a warning says so, and the last completed round's record stands
(lightning_fed/callbacks/loop_evaluation.py).
"""

import lightning.pytorch as pl
import pytest
from lightning.pytorch.loggers.logger import Logger

from lightning_fed.callbacks import FederatedLoop
from tests.helpers.runs import preference_data, tiny_dpo


class _StopInRound2(pl.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.current_epoch == 1 and batch_idx == 1:  # the 2nd of round 2's 8 batches
            trainer.should_stop = True


class _Recorded(Logger):
    """Keeps what is logged: ``(step, name, value)``."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[int, str, float]] = []

    name, version = "recorded", 0

    def log_metrics(self, metrics, step=None):
        self.records.extend((step, k, float(v)) for k, v in metrics.items())

    def log_hyperparams(self, params, *args, **kwargs):
        pass


def test_a_validation_on_a_stop_inside_a_round_is_not_recorded_as_that_round(tmp_path):
    loop = FederatedLoop(rounds=3, clients_per_round=2, local_steps=4, seed=0, batch_clients=1)
    logger = _Recorded()
    trainer = pl.Trainer(
        default_root_dir=str(tmp_path),
        callbacks=[loop, _StopInRound2()],
        logger=logger,
        enable_model_summary=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    with pytest.warns(UserWarning, match="round 2: the validation Lightning ran on a stop requested inside the round"):
        trainer.fit(tiny_dpo(), datamodule=preference_data())
    history = loop.server.report.history
    assert [h["round"] for h in history] == [1]  # round 2 never closed
    assert float(trainer.callback_metrics["val/loss"]) == pytest.approx(history[-1]["val"]["loss"])
    rounds = {step for step, name, _ in logger.records if name == "round/val_loss"}
    assert rounds == {1}
