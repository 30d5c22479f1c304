"""The values Lightning's own callbacks refuse in their ``__init__``, declared once, without torch.

``EarlyStopping(mode="sideways")`` or ``ModelCheckpoint(every_n_epochs=-5)`` raise Lightning's
``MisconfigurationException`` only when the callback is built, after 10 s of imports, and it came
out as exit 1 (a failure during training) instead of 2 (a config to fix). Here each bound is the
constructor's own, stated as :class:`~lightning_fed.value_rules.Rule`\\ s (and the few rules between
two options as functions), checked by :func:`refused_value` before torch is imported.
``tests/test_lightning_refused_values.py`` builds each real Lightning class with each refused value
and with each accepted boundary value, so the table stays what Lightning does as Lightning changes.

Lightning's ``EarlyStopping`` takes any ``patience`` and ``min_delta`` (a negative ``patience``
stops at the first epoch without improvement): their types are checked
(:mod:`lightning_fed.lightning_init_args`), not their values. Imports nothing but the standard
library and :mod:`lightning_fed.value_rules`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

from lightning_fed.value_rules import Rule, at_least, in_range, one_of

MODES = ("min", "max")
REFUSED: dict[str, tuple[Rule, ...]] = {
    "EarlyStopping": (one_of("mode", MODES),),
    "ModelCheckpoint": (
        one_of("mode", MODES),
        at_least("save_top_k", -1, integer=True),
        at_least("every_n_train_steps", 0, integer=True, nullable=True),
        at_least("every_n_epochs", 0, integer=True, nullable=True),
    ),
    "LearningRateMonitor": (one_of("logging_interval", ("step", "epoch"), nullable=True),),
    "Timer": (one_of("interval", ("step", "epoch")),),
    "BatchSizeFinder": (one_of("mode", ("power", "binsearch")), in_range("margin", 0.0, 1.0, high_open=True)),
    "LearningRateFinder": (one_of("mode", ("linear", "exponential")),),
}
"""Lightning's callback (short name) -> the rules its ``__init__`` raises with (``lightning/pytorch/callbacks``)."""
ANY_CASE = {("BatchSizeFinder", "mode")}
"""Options the constructor lower-cases before comparing (``mode.lower()``)."""
DURATION = re.compile(r"(\d+):(\d\d):(\d\d):(\d\d)")
"""``Timer(duration=...)`` as a string (``DD:HH:MM:SS``, stripped, as the Timer matches it)."""


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_word(text: str, integer: bool) -> int | float | None:
    """``text`` as jsonargparse reads a string given for an ``int`` (``integer``) or a ``float``, or ``None``."""
    try:
        return int(text.strip()) if integer else float(text.strip())
    except ValueError:
        return None


def _checkpoint_problem(key: str, init_args: Mapping[str, Any]) -> str | None:
    """``ModelCheckpoint``'s rules between options (``__validate_init_configuration``): at most one
    of ``every_n_train_steps`` / ``every_n_epochs`` >= 1 and ``train_time_interval``; a
    ``save_top_k`` other than -1, 0, 1 needs a ``monitor``."""
    triggers = [
        name
        for name in ("every_n_train_steps", "every_n_epochs")
        if _numeric(init_args.get(name)) and init_args[name] >= 1
    ]
    if init_args.get("train_time_interval") is not None:
        triggers.append("train_time_interval")
    if len(triggers) > 1:
        return f"{key}: ModelCheckpoint takes one of {', '.join(triggers)}, not {len(triggers)} (they say when to save)"
    top_k = init_args.get("save_top_k")
    if init_args.get("monitor") is None and _numeric(top_k) and top_k not in (-1, 0, 1):
        return (
            f"{key}.save_top_k={top_k} needs a monitor (the metric to rank checkpoints by);"
            " without one save_top_k must be -1, 0 or 1"
        )
    return None


def _timer_problem(key: str, init_args: Mapping[str, Any]) -> str | None:
    """``Timer(duration=...)``: a string must be ``DD:HH:MM:SS``."""
    duration = init_args.get("duration")
    if isinstance(duration, str) and not DURATION.fullmatch(duration.strip()):
        return (
            f"{key}.duration must be a duration DD:HH:MM:SS (e.g. 00:12:00:00) or a mapping such as {{hours: 12}},"
            f" got {duration!r}"
        )
    return None


def _swa_problem(key: str, init_args: Mapping[str, Any]) -> str | None:
    """``StochasticWeightAveraging``: ``swa_epoch_start`` an integer >= 1 or a float in [0, 1];
    ``swa_lrs`` a float > 0 or a list of them."""
    start = init_args.get("swa_epoch_start")
    if (isinstance(start, int) and not isinstance(start, bool) and start < 1) or (
        isinstance(start, float) and not 0 <= start <= 1
    ):
        return f"{key}.swa_epoch_start must be an epoch >= 1 or a fraction of the epochs in [0.0, 1.0], got {start!r}"
    lrs = init_args.get("swa_lrs")
    listed = lrs if isinstance(lrs, list) else [lrs]
    if "swa_lrs" in init_args and not all(isinstance(lr, str) or (_numeric(lr) and lr > 0) for lr in listed):
        return f"{key}.swa_lrs must be a learning rate > 0 (a float, e.g. 0.01) or a list of them, got {lrs!r}"
    return None


def _accumulation_problem(key: str, init_args: Mapping[str, Any]) -> str | None:
    """``GradientAccumulationScheduler(scheduling=...)``: a non-empty mapping of epochs >= 0 to factors >= 1."""
    scheduling = init_args.get("scheduling")
    if not isinstance(scheduling, dict):
        return None  # another shape: the type check's, or the parser's
    integers = [v for pair in scheduling.items() for v in pair if isinstance(v, int) and not isinstance(v, bool)]
    if len(integers) != 2 * len(scheduling):
        return None  # a word among them: the parser's
    if not scheduling or any(epoch < 0 for epoch in scheduling) or any(factor < 1 for factor in scheduling.values()):
        return (
            f"{key}.scheduling must map epochs >= 0 to accumulation factors >= 1 (e.g. {{0: 4, 4: 1}}),"
            f" got {scheduling!r}"
        )
    return None


def _exception_checkpoint_problem(key: str, init_args: Mapping[str, Any]) -> str | None:
    """``OnExceptionCheckpoint(filename="")``: a file needs a name."""
    filename = init_args.get("filename")
    return f"{key}.filename must be a file name (not empty), got ''" if filename == "" else None


BETWEEN: dict[str, Callable[[str, Mapping[str, Any]], str | None]] = {
    "ModelCheckpoint": _checkpoint_problem,
    "Timer": _timer_problem,
    "StochasticWeightAveraging": _swa_problem,
    "GradientAccumulationScheduler": _accumulation_problem,
    "OnExceptionCheckpoint": _exception_checkpoint_problem,
}
"""Lightning's callback -> the rules its ``__init__`` raises with that one :class:`Rule` cannot state
(between options, or on a string's or a mapping's contents)."""


def refused_value(key: str, name: str, init_args: Mapping[str, Any]) -> str | None:
    """The line refusing a value Lightning's callback ``name`` (short name) refuses in ``__init__``,
    given ``init_args`` as merged (``key``: ``trainer.callbacks[0]``), or ``None``. A string given
    for a number is read as the parser reads it (``"-5"``); a word is left to the type check."""
    for rule in REFUSED.get(name, ()):
        if rule.name not in init_args:
            continue
        value = init_args[rule.name]
        if rule.choices is None and isinstance(value, str):
            value = _number_word(value, rule.integer)  # `every_n_epochs: "-5"`: the parser reads -5
            if value is None:
                continue  # a word: the type check's
        if (name, rule.name) in ANY_CASE and isinstance(value, str):
            value = value.lower()
        if problem := dataclasses.replace(rule, option=f"{key}.{rule.name}").problem(value):
            return problem
    between = BETWEEN.get(name)
    return between(key, init_args) if between is not None else None
