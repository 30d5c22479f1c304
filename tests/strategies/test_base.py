import math

import pytest
import torch

from lightning_fed import strategies
from lightning_fed.state import clone_state, state_nbytes
from lightning_fed.strategies import (
    AggregationError,
    ClientUpdate,
    LocalCorrection,
    Strategy,
    available_strategies,
    check_update,
    weighted_average,
)

GLOBAL = {"w": torch.tensor([1.0, 2.0]), "b": torch.zeros(2, 2)}


def _update(**changes):
    fields = {
        "client_id": 7,
        "num_examples": 5,
        "state": {"w": torch.tensor([0.0, 1.0]), "b": torch.ones(2, 2)},
        "extras": {},
    }
    fields.update(changes)
    return ClientUpdate(**fields)


def test_check_update_accepts_matching_update():
    check_update(GLOBAL, _update())


@pytest.mark.parametrize(
    ("update", "match"),
    [
        (_update(state={"w": torch.zeros(2)}), r"missing=\['b'\]"),
        (_update(state={"w": torch.zeros(2), "b": torch.zeros(2, 2), "z": torch.zeros(1)}), r"unexpected=\['z'\]"),
        (_update(state={"w": torch.zeros(3), "b": torch.zeros(2, 2)}), r"shape mismatch.*w: \(3,\) != \(2,\)"),
        (_update(state={"w": torch.tensor([0.0, math.nan]), "b": torch.zeros(2, 2)}), r"non-finite.*state \['w'\]"),
        (_update(state={"w": torch.tensor([math.inf, 0.0]), "b": torch.zeros(2, 2)}), r"non-finite.*state \['w'\]"),
        (_update(extras={"control/w": torch.tensor([-math.inf, 0.0])}), r"non-finite values in extras"),
        (_update(num_examples=0), r"num_examples must be > 0, got 0"),
        (_update(num_examples=-3), r"num_examples must be > 0, got -3"),
    ],
    ids=["missing-key", "extra-key", "shape", "nan", "inf", "inf-extras", "zero-examples", "negative-examples"],
)
def test_check_update_rejects_with_client_id(update, match):
    with pytest.raises(AggregationError, match=match) as err:
        check_update(GLOBAL, update)
    assert "client 7" in str(err.value)


def test_weighted_average_hand_values():
    states = [{"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([3.0, 6.0])}]
    # (1 * [1, 2] + 3 * [3, 6]) / 4 = [10, 20] / 4 = [2.5, 5]
    out = weighted_average(states, [1, 3])
    torch.testing.assert_close(out["w"], torch.tensor([2.5, 5.0]))


def test_weighted_average_keeps_dtype_but_accumulates_in_float32():
    # bf16 values 1 apart cannot hold (256 + 258 + 256) / 3 = 256.67 (spacing 2 near 256);
    # the float32 accumulator can, and cast_back=False returns it unrounded.
    states = [{"w": torch.tensor([v], dtype=torch.bfloat16)} for v in (256.0, 258.0, 256.0)]
    out = weighted_average(states, [1, 1, 1])
    assert out["w"].dtype == torch.bfloat16
    raw = weighted_average(states, [1, 1, 1], cast_back=False)
    assert raw["w"].dtype == torch.float32
    torch.testing.assert_close(raw["w"], torch.tensor([770.0 / 3]))


def test_weighted_average_does_not_modify_inputs():
    states = [{"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([3.0, 6.0])}]
    out = weighted_average(states, [1, 1])
    out["w"].add_(100)
    torch.testing.assert_close(states[0]["w"], torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize(
    ("states", "weights", "match"),
    [
        ([], [], "empty"),
        ([{"w": torch.zeros(1)}], [1, 2], "1 states but 2 weights"),
        ([{"w": torch.zeros(1)}], [0], "positive"),
    ],
)
def test_weighted_average_errors(states, weights, match):
    with pytest.raises(AggregationError, match=match):
        weighted_average(states, weights)


def test_state_nbytes_and_clone_state():
    state = {"a": torch.zeros(2), "b": torch.zeros(3, dtype=torch.bfloat16)}
    assert state_nbytes(state) == 2 * 4 + 3 * 2
    param = torch.nn.Parameter(torch.ones(2))
    copy = clone_state({"p": param})
    assert not copy["p"].requires_grad and copy["p"].device.type == "cpu"
    copy["p"].add_(1)
    torch.testing.assert_close(param.detach(), torch.ones(2))


def test_default_local_correction_is_a_no_op():
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.tensor([1.0, -1.0])
    correction = LocalCorrection()
    correction.correct_gradients({"p": p})
    torch.testing.assert_close(p.grad, torch.tensor([1.0, -1.0]))
    assert correction.finish({"p": p}, num_steps=3, lr=0.1) == {}


def test_registry_names_every_strategy():
    # the package's strategies proper (wrappers such as lightning_fed.privacy.ClientLevelDP register once imported)
    ours = {n: p for n, p in available_strategies().items() if p[0].startswith("lightning_fed.strategies.")}
    assert set(ours) == {
        "FedAvg",
        "FedProx",
        "Scaffold",
        "FedAvgM",
        "FedAdagrad",
        "FedYogi",
        "FedAdam",
        "FedAMP",
        "FedBiscuit",
        "FedNova",
        "CoordinateMedian",
        "TrimmedMean",
        "HetLoRA",
        "FlexLoRA",
        "FLoRA",
        "FedBuff",
    }
    for name, (path,) in ours.items():
        cls = getattr(strategies, name)
        assert path == f"lightning_fed.strategies.{name}" and issubclass(cls, Strategy)
        strategy = cls()
        strategy.load_state_dict(strategy.state_dict())
