"""Per-parameter strategy state against the parameters' shapes (found from outside, issue 41)."""

from __future__ import annotations

import torch

from lightning_fed.federation.strategy_check import per_parameter_problem

SHAPES = {"a.weight": torch.Size([2, 3]), "b.weight": torch.Size([4])}


def test_a_moment_of_another_shape_is_named():
    state = {"m": {"a.weight": torch.zeros(3), "b.weight": torch.zeros(4)}, "step": 1}
    assert per_parameter_problem(state, SHAPES, "federation.strategy") == (
        "federation.strategy.m.a.weight",
        "has shape (3,), the parameter has (2, 3)",
    )


def test_a_negative_second_moment_is_named_and_a_negative_first_moment_is_not():
    good = {"m": {"a.weight": -torch.ones(2, 3)}, "v": {"a.weight": torch.ones(2, 3)}}
    assert per_parameter_problem(good, SHAPES, "federation.strategy") is None
    bad = {"v": {"b.weight": torch.tensor([1.0, 0.0, -1e-9, 2.0])}}
    assert per_parameter_problem(bad, SHAPES, "federation.strategy") == (
        "federation.strategy.v.b.weight",
        "has negative entries (a second moment is a mean of squares)",
    )


def test_a_wrapped_strategy_s_state_is_checked_too():
    nested = {"strategy": {"v": {"a.weight": torch.zeros(2, 2)}}}
    assert per_parameter_problem(nested, SHAPES, "federation.strategy")[0] == "federation.strategy.strategy.v.a.weight"
