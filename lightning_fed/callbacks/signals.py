"""SIGTERM and Ctrl-C: stop at a resumable point and say so in the exit status (143 / 130).

Schedulers (SLURM, Kubernetes) send SIGTERM before they kill. Until Lightning installs its
own handler (loading the model, reading the data, and inside ``trainer.fit`` the setup hooks,
the checkpoint restore and ``on_fit_start``, which all run before Lightning's
``register_signal_handlers``) :func:`handle_termination` turns SIGTERM into a
:class:`~lightning_fed.errors.Terminated` exception where it lands: no round of this run was
done, the checkpoint it resumes from is untouched, the process exits 143. A flag "inside the
fit" is not the test: it would drop a SIGTERM sent in that window (issue 22). Once Lightning's
handler is installed it calls ours too (it composes with the handler it finds); then
Lightning's own signal connector handles it: it sets
``trainer.received_sigterm`` and the loops raise ``SIGTERMException`` after the current batch
(``lightning/pytorch/loops/training_epoch_loop.py``), which abandons the round in progress.
``last.ckpt`` is then the one :class:`~lightning.pytorch.callbacks.ModelCheckpoint` wrote at the
end of the last complete round: a round half done is not resumable exactly (its client
updates are not in any checkpoint), the round's start is. Ctrl-C goes through Lightning's
``KeyboardInterrupt`` handling, which exits 1; :class:`ProcessSignals` records it so the CLI
exits 130 instead.

The exception raised from the handler cannot always leave where the signal landed: in a
``__del__``, a finalizer or a weakref callback Python prints "Exception ignored in ..." and goes
on (a SIGTERM in ``regex``'s ``Group.__del__`` while a resume started trained every round and
exited 0, issue 41 H2). So the handler also records the request, and :func:`stop_if_requested`
raises it again at the safe points: after the model and data are built, before the run folder is
claimed, and in :class:`ProcessSignals`' fit hooks (setup, fit start, train start, each round and
each batch). A request dropped that way is not reported as an ignored exception: the stop follows.

A round's end is one step: its record (``rounds.jsonl``, written when the round is aggregated, at its
last batch) and its checkpoint (``ModelCheckpoint`` at ``on_train_epoch_end``) have the round's
evaluation between them, and Lightning's evaluation loop raises ``SIGTERMException`` after any of its
batches but the last: a SIGTERM there left the round recorded and no checkpoint of it, and a first
round's stop line said no round completed (red team 16 B08). :class:`ProcessSignals` holds such a
SIGTERM back until the round's evaluation is over (:meth:`ProcessSignals.on_validation_batch_end`)
and hands it back to Lightning at ``on_train_epoch_end``, before ``ModelCheckpoint`` saves (it runs
after the other callbacks): the round's checkpoint is written, then the fit loop stops, and
``last.ckpt`` holds the round the record names.

Once the run has completed (``on_train_end``: every round trained, its files written) or its
outcome is being reported, a SIGTERM no longer changes it: the run prints its closing line and
exits 0 (or the status it reported); after :func:`handle_termination` with ``ending=True`` (the
process's last work) SIGTERM stays ignored (:func:`lightning_fed.startup.ended`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException
from typing_extensions import override

from lightning_fed import startup
from lightning_fed.errors import Terminated


class ProcessSignals(Callback):
    """Tracks what the process exit status needs: whether training started, which signal stopped it.

    Attributes:
        training_started: ``on_fit_start`` ran: setup, data and checkpoint restore are done, so
            an error from here on is a training failure (exit 1), not bad input (exit 2).
        in_fit: between ``setup`` and ``teardown`` (SIGTERM is Lightning's once its handler is in place).
        stopped_by: ``"SIGTERM"`` or ``"SIGINT"`` when a signal ended the fit.
        resume_from: the checkpoint this run resumed from (set by the CLI), if any.
        finished: the run completed (``on_train_end``) or its outcome is being reported (set by the
            CLI): a SIGTERM from then on does not change its exit status.
    """

    def __init__(self) -> None:
        self.training_started = False
        self.in_fit = False
        self.stopped_by: str | None = None
        self.resume_from: Path | None = None
        self.finished = False
        self._saved: Path | None = None  # the checkpoint this run last wrote
        self._wrote = False
        self._held_back = False  # a SIGTERM during a round's closing evaluation, handed back at its end

    @property
    def last_checkpoint(self) -> Path | None:
        """The checkpoint a run stopped now resumes from: the last one it wrote, else the one it
        resumed from (stopped before its first round ended), when that file exists."""
        last = self._saved or self.resume_from
        return last if last is not None and last.is_file() else None

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        stop_if_requested()
        self.in_fit = True

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        stop_if_requested()
        self.training_started = True

    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        stop_if_requested()  # the first hook after Lightning's handler is in place (checkpoint restored)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        stop_if_requested()

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        stop_if_requested()

    @override
    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        # the evaluation after a round's last batch: the round is recorded, its checkpoint follows
        if trainer.received_sigterm and not trainer.sanity_checking and _round_closing(trainer):
            self._held_back = True
            trainer._signal_connector.received_sigterm = False  # Lightning's flag: no setter of its own

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._held_back:  # ModelCheckpoint saves the round next, then the fit loop stops
            self._held_back = False
            trainer._signal_connector.received_sigterm = True

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.finished = True  # after FederatedLoop's (callbacks run in order): every round trained, its files written

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, (SIGTERMException, Terminated)) or trainer.received_sigterm or self._held_back:
            self.stopped_by = "SIGTERM"
        elif isinstance(exception, KeyboardInterrupt):
            self.stopped_by = "SIGINT"
        else:
            return
        if not self._wrote:  # a restored checkpoint callback names the files of the run resumed from
            return
        callback = trainer.checkpoint_callback  # the CLI's default keeps its one file as the best (`last.ckpt`)
        last = getattr(callback, "last_model_path", "") or getattr(callback, "best_model_path", "") or ""
        if last:
            self._saved = Path(last)

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._wrote = True

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.in_fit = False


def _round_closing(trainer: pl.Trainer) -> bool:
    """Whether the fit is between a round's last batch and the round's end (its evaluation)."""
    return trainer.state.fn == "fit" and trainer.fit_loop.epoch_loop._is_training_done


_requested: int | None = None
"""The signal :func:`handle_termination`'s handler raised :class:`Terminated` for, in case the code it
landed in dropped the exception; :func:`stop_if_requested` raises it again."""


def stop_if_requested() -> None:
    """Raise :class:`Terminated` if a SIGTERM was requested (a safe point: see the module docstring)."""
    if _requested is not None:
        raise Terminated(_requested)


def _quiet_about_requests(previous: Any) -> Any:
    """A ``sys.unraisablehook`` silent about a dropped :class:`Terminated` (the stop follows at the next
    safe point, its own line says what happened), ``previous`` for everything else."""

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, Terminated):
            previous(unraisable)

    return hook


@contextlib.contextmanager
def handle_termination(signals: ProcessSignals, ending: bool = False) -> Iterator[ProcessSignals]:
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread unless Lightning's
    handler is installed, and is recorded for :func:`stop_if_requested`.

    Lightning's handler composes with this one (it calls it after its own), which then does
    nothing: Lightning stops the loop after the current batch. Whether this handler was called
    by Lightning's or by the interpreter is whether it is the installed one. The previous handler
    is restored on exit, or with ``ending`` (the block is the process's last work, its outcome
    reported) SIGTERM is ignored from then on.
    """
    global _requested
    if threading.current_thread() is not threading.main_thread():  # signal.signal would raise
        yield signals
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        global _requested
        if signals.finished:  # the run completed: it ends with exit 0, not "stopped, no checkpoint" (issue 41)
            return
        if signal.getsignal(signal.SIGTERM) is on_sigterm:  # Lightning's handler is not in place
            _requested = signum
            raise Terminated(signum)

    requested, unraisable = _requested, sys.unraisablehook
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    sys.unraisablehook = _quiet_about_requests(unraisable)
    try:
        yield signals
    finally:
        if ending:
            startup.ended()
        else:
            signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook, _requested = unraisable, requested
