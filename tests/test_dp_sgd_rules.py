"""``model.dp_sgd``'s rules (lightning_fed/dp_sgd_rules.py) are the dataclass's: its defaults, its
fields, and the same line for a refused value (the CLI cases: tests/test_class_kinds_cli.py)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from lightning_fed.class_parameters import fields
from lightning_fed.dp_sgd_rules import SETTINGS, dp_sgd_problems


def test_the_rules_take_the_dataclass_fields_with_its_defaults():
    from lightning_fed.privacy.dp_sgd import DPSGDSettings

    defaults = {f.name: f.default for f in dataclasses.fields(DPSGDSettings)}
    params = {p.name: p.default for p in inspect.signature(dp_sgd_problems).parameters.values()}
    assert params == defaults
    assert list(fields(*SETTINGS)) == list(defaults)


@pytest.mark.parametrize(
    "given",
    [{"clip_norm": -1.0, "target_epsilon": 8.0}, {"noise_multiplier": False}, {"target_epsilon": 1.0, "seed": "x"}],
)
def test_the_dataclass_refuses_with_the_rules_line(given):
    from lightning_fed.privacy.dp_sgd import DPSGDSettings

    with pytest.raises(ValueError) as err:
        DPSGDSettings(**given)
    assert str(err.value) == "; ".join(dp_sgd_problems(**given))
