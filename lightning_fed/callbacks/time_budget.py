"""``trainer.max_time`` in a federated run: a wall-clock budget checked at the end of each round.

Lightning's :class:`~lightning.pytorch.callbacks.Timer` (added by the ``Trainer`` for ``max_time``)
checks after every batch by default; in a federated run a batch is a client's local step, so the
budget could end an epoch (a round) half done, its remaining clients never trained, and the
checkpoint written at that epoch's end would hold a round the federation never closed.
:func:`check_at_round_ends` makes it check at epoch ends: the round in progress completes, is
evaluated and checkpointed, and no next round starts.

A run so stopped exits 0 like a finished one; the seventh outside run (a8debca) found it said
nothing: ``max_time: 00:00:00:01`` with ``rounds: 2`` ended after round 1, ``summary.json``
without ``stopped``, the closing line ``(round 0 -> round 1)``. :func:`stopped_early` is the
``stopped`` record ``summary.json`` then holds (``lightning_fed.report.closing`` says it last).
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.callbacks.timer import Interval


def _timer(trainer: pl.Trainer) -> Timer | None:
    return next((c for c in getattr(trainer, "callbacks", None) or [] if isinstance(c, Timer)), None)


def check_at_round_ends(trainer: pl.Trainer) -> None:
    """The ``Timer`` of ``trainer.max_time`` (if any) checks after each round, not after each batch."""
    timer = _timer(trainer)
    if timer is not None:
        timer._interval = Interval.epoch  # noqa: SLF001 - the Timer's own switch, set at its __init__


def stopped_early(trainer: pl.Trainer, completed: int, rounds: int) -> dict[str, Any] | None:
    """``summary.json``'s ``stopped`` for a run that ended with ``completed`` of ``rounds`` rounds because
    ``trainer.max_time`` ran out, or ``None`` (all rounds done, or another reason: a privacy budget's
    stop is the ``privacy`` section's)."""
    timer = _timer(trainer)
    if completed >= rounds or timer is None or timer._duration is None:  # noqa: SLF001
        return None
    remaining = timer.time_remaining()
    if remaining is None or remaining > 0:
        return None
    budget = _max_time_text(timer._duration)  # noqa: SLF001 - seconds, as Timer keeps it
    return {"reason": f"trainer.max_time ({budget}) reached", "after_round": completed, "rounds": rounds}


def val_check_options(trainer: pl.Trainer) -> dict[str, Any]:
    """The Trainer's ``val_check_interval`` and ``limit_val_batches`` as
    :func:`~lightning_fed.loop_conflicts.val_check_problem` reads them from a config: a duration, which
    Lightning keeps only in seconds, as ``DD:HH:MM:SS``. A Trainer built in Python is refused at the
    loop's start with the precheck's line (the CLI refuses it before torch)."""
    seconds = getattr(trainer, "_val_check_time_interval", None)  # Lightning's own, set at __init__
    interval = _max_time_text(seconds) if seconds is not None else getattr(trainer, "val_check_interval", None)
    return {"val_check_interval": interval, "limit_val_batches": trainer.limit_val_batches}


def _max_time_text(seconds: float) -> str:
    """``seconds`` as ``DD:HH:MM:SS``, the form ``trainer.max_time`` is written in (``0.5 s`` below whole seconds)."""
    if seconds != int(seconds):
        return f"{seconds:g} s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    return f"{days:02d}:{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
