"""The table of values Lightning's callbacks refuse (:mod:`lightning_fed.lightning_refused_values`)
is what Lightning's constructors do: each real class is built with each refused value (it raises)
and with each accepted boundary value (it does not), so the table stays true as Lightning changes.
"""

from __future__ import annotations

import pytest

from lightning_fed.lightning_refused_values import REFUSED, refused_value
from lightning_fed.value_rules import Rule

BASE = {
    "EarlyStopping": {"monitor": "x"},
    "StochasticWeightAveraging": {"swa_lrs": 0.1},
    "GradientAccumulationScheduler": {"scheduling": {0: 1}},
    "OnExceptionCheckpoint": {"dirpath": "."},
}
"""The arguments a class cannot be built without."""


def _values(rule: Rule) -> tuple[list, list]:
    """(refused, accepted) values of one rule: the bound and one step past it, each choice and a word."""
    if rule.choices is not None:
        return ["sideways", "MIN!"], [*rule.choices, *([None] if rule.nullable else [])]
    low, high = rule.low, rule.high
    refused, accepted = [], []
    step = 1 if rule.integer else 1e-6
    if low is not None:
        accepted.append(int(low) if rule.integer else low)
        refused.append((int(low) if rule.integer else low) - step)
    if high is not None:
        (refused if rule.high_open else accepted).append(high)
        if not rule.high_open:
            refused.append(high + step)
    return refused, accepted + ([None] if rule.nullable else [])


CASES = [
    (name, rule.name, value, refused)
    for name, rules in REFUSED.items()
    for rule in rules
    for refused, values in zip((True, False), _values(rule), strict=True)
    for value in values
]
BETWEEN = [  # the rules between options: (class, init_args, refused)
    ("ModelCheckpoint", {"every_n_epochs": 1, "every_n_train_steps": 1}, True),
    ("ModelCheckpoint", {"every_n_epochs": 0, "every_n_train_steps": 1}, False),
    ("ModelCheckpoint", {"every_n_train_steps": 2, "train_time_interval": {"hours": 1}}, True),
    ("ModelCheckpoint", {"save_top_k": 2}, True),
    ("ModelCheckpoint", {"save_top_k": 2, "monitor": "x"}, False),
    ("ModelCheckpoint", {"save_top_k": 1}, False),
    ("Timer", {"duration": "1:00:00"}, True),
    ("Timer", {"duration": "00:01:00:00"}, False),
    ("StochasticWeightAveraging", {"swa_epoch_start": 0}, True),
    ("StochasticWeightAveraging", {"swa_epoch_start": 1}, False),
    ("StochasticWeightAveraging", {"swa_epoch_start": 1.5}, True),
    ("StochasticWeightAveraging", {"swa_epoch_start": 0.0}, False),
    ("StochasticWeightAveraging", {"swa_lrs": -0.1}, True),
    ("StochasticWeightAveraging", {"swa_lrs": [0.1, 0.2]}, False),
    ("StochasticWeightAveraging", {"swa_lrs": [0.1, -0.2]}, True),
    ("GradientAccumulationScheduler", {"scheduling": {}}, True),
    ("GradientAccumulationScheduler", {"scheduling": {-1: 2}}, True),
    ("GradientAccumulationScheduler", {"scheduling": {0: 0}}, True),
    ("GradientAccumulationScheduler", {"scheduling": {0: 1, 4: 2}}, False),
    ("OnExceptionCheckpoint", {"filename": ""}, True),
    ("OnExceptionCheckpoint", {"filename": "x"}, False),
]


def _built(name: str, init_args: dict) -> bool:
    """Whether Lightning's class ``name`` is built from ``init_args`` (``False``: its ``__init__`` raised)."""
    from datetime import timedelta

    from lightning.pytorch import callbacks

    args = {**BASE.get(name, {}), **init_args}
    if isinstance(args.get("train_time_interval"), dict):
        args["train_time_interval"] = timedelta(**args["train_time_interval"])  # as the parser builds it
    try:
        getattr(callbacks, name)(**args)
    except Exception:  # noqa: BLE001 - MisconfigurationException, ValueError, AssertionError: refused
        return False
    return True


@pytest.mark.parametrize(("name", "option", "value", "refused"), CASES, ids=[f"{c[0]}.{c[1]}={c[2]!r}" for c in CASES])
def test_a_value_in_the_table_is_what_lightning_refuses(name, option, value, refused):
    assert (refused_value("trainer.callbacks[0]", name, {option: value}) is not None) == refused
    assert _built(name, {option: value}) == (not refused)


@pytest.mark.parametrize(("name", "init_args", "refused"), BETWEEN, ids=[f"{b[0]}-{b[1]}" for b in BETWEEN])
def test_a_rule_between_options_is_what_lightning_refuses(name, init_args, refused):
    assert (refused_value("trainer.callbacks[0]", name, {**BASE.get(name, {}), **init_args}) is not None) == refused
    assert _built(name, init_args) == (not refused)


def test_the_table_names_lightning_s_exported_callbacks():
    from lightning_fed.trainer_classes import lightning_exports

    exported = set(lightning_exports("pytorch", "callbacks") or ())
    assert {*REFUSED, "StochasticWeightAveraging"} <= exported


def test_a_number_written_as_a_string_is_read_as_the_parser_reads_it():
    """jsonargparse reads ``every_n_epochs: "-5"`` as -5 (which Lightning refuses); a word is the type check's."""
    assert refused_value("trainer.callbacks[0]", "ModelCheckpoint", {"every_n_epochs": "-5"}) == (
        "trainer.callbacks[0].every_n_epochs must be >= 0 or null, got -5"
    )
    assert refused_value("trainer.callbacks[0]", "ModelCheckpoint", {"every_n_epochs": "often"}) is None
