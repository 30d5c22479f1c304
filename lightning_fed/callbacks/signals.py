"""SIGTERM and Ctrl-C: stop at a resumable point and say so in the exit status (143 / 130).

Schedulers (SLURM, Kubernetes) send SIGTERM before they kill. Outside a fit (loading the
model, reading the data) :func:`handle_termination` turns SIGTERM into a
:class:`~lightning_fed.errors.Terminated` exception: nothing was written yet, the process just
exits 143. During a fit Lightning's own signal connector handles it: it sets
``trainer.received_sigterm`` and the loops raise ``SIGTERMException`` after the current batch
(``lightning/pytorch/loops/training_epoch_loop.py``), which abandons the round in progress.
``last.ckpt`` is then the one :class:`~lightning.pytorch.callbacks.ModelCheckpoint` wrote at the
end of the last complete round: a round half done is not resumable exactly (its client
updates are not in any checkpoint), the round's start is. Ctrl-C goes through Lightning's
``KeyboardInterrupt`` handling, which exits 1; :class:`ProcessSignals` records it so the CLI
exits 130 instead.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from lightning_fed.errors import Terminated


class ProcessSignals(Callback):
    """Tracks what the process exit status needs: whether training started, which signal stopped it.

    Attributes:
        training_started: ``on_fit_start`` ran: setup, data and checkpoint restore are done, so
            an error from here on is a training failure (exit 1), not bad input (exit 2).
        in_fit: between ``setup`` and ``teardown``: SIGTERM is Lightning's to handle.
        stopped_by: ``"SIGTERM"`` or ``"SIGINT"`` when a signal ended the fit.
        last_checkpoint: the ``last.ckpt`` a resumed run should start from, when one exists.
    """

    def __init__(self) -> None:
        self.training_started = False
        self.in_fit = False
        self.stopped_by: str | None = None
        self.last_checkpoint: Path | None = None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.in_fit = True

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.training_started = True

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException) or trainer.received_sigterm:
            self.stopped_by = "SIGTERM"
        elif isinstance(exception, KeyboardInterrupt):
            self.stopped_by = "SIGINT"
        else:
            return
        callback = trainer.checkpoint_callback  # the CLI's default keeps its one file as the best (`last.ckpt`)
        last = getattr(callback, "last_model_path", "") or getattr(callback, "best_model_path", "") or ""
        self.last_checkpoint = Path(last) if last and Path(last).is_file() else None

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.in_fit = False


@contextlib.contextmanager
def handle_termination(signals: ProcessSignals) -> Iterator[ProcessSignals]:
    """Within the block, SIGTERM outside a fit raises :class:`Terminated` in the main thread.

    During a fit the handler does nothing itself: Lightning composes it with its own, which
    stops the loop after the current batch. The previous handler is restored on exit.
    """
    if threading.current_thread() is not threading.main_thread():  # signal.signal would raise
        yield signals
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        if not signals.in_fit:
            raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield signals
    finally:
        signal.signal(signal.SIGTERM, previous)
