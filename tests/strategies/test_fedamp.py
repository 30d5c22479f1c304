"""FedAMP: attention weights, personalized cloud models, global state, resume state."""

import math

import pytest
import torch

from lightning_fed.strategies import ClientUpdate, LocalCorrection, ProximalCorrection
from lightning_fed.strategies.fedamp import FedAMP, attention_weights

E = math.e


def test_attention_weights_by_hand():
    xi = attention_weights(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]), temperature=1.0, self_weight_floor=0.5)
    # row 0: softmax(cos / 1) = softmax([1, 1, 0]) = [e, e, 1] / (2e + 1); self weight 0.4223 < 0.5 is raised to
    # 0.5 and the others shrink by 0.5 / (1 - 0.4223)
    raw = [E / (2 * E + 1), E / (2 * E + 1), 1 / (2 * E + 1)]
    shrink = 0.5 / (1 - raw[0])
    assert xi[0].tolist() == pytest.approx([0.5, raw[1] * shrink, raw[2] * shrink])
    # row 2: softmax([0, 0, 1]) = [1, 1, e] / (2 + e); self weight 0.576 is above the floor, unchanged
    assert xi[2].tolist() == pytest.approx([1 / (2 + E), 1 / (2 + E), E / (2 + E)])
    assert xi.sum(1).tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert attention_weights(torch.ones(1, 3), 0.5, 0.05).tolist() == [[1.0]]


def test_lower_temperature_concentrates_on_similar_clients():
    v = torch.tensor([[1.0, 0.0], [0.9, 0.1], [-1.0, 0.0]])
    hot, cold = attention_weights(v, 2.0, 0.0), attention_weights(v, 0.1, 0.0)
    assert cold[0, 2] < hot[0, 2] and cold[0, 1] > hot[0, 1]


def test_aggregate_personalizes_each_client():
    strategy = FedAMP(temperature=1.0, self_weight_floor=0.5)
    origin = {"w": torch.zeros(2)}
    strategy.setup(origin, num_clients=4)
    ups = [
        ClientUpdate(0, 1, {"w": torch.tensor([1.0, 0.0])}),
        ClientUpdate(1, 1, {"w": torch.tensor([1.0, 0.0])}),
        ClientUpdate(2, 2, {"w": torch.tensor([0.0, 1.0])}),
    ]
    global_state = strategy.aggregate(origin, ups)
    assert global_state["w"].tolist() == pytest.approx([0.5, 0.5])  # |D|-weighted mean of the latest models
    raw = 1 / (2 * E + 1)
    other = raw * 0.5 / (1 - E * raw)
    # u_0 = 0.5 w_0 + xi_01 w_1 + xi_02 w_2
    assert strategy.client_model(0, global_state)["w"].tolist() == pytest.approx([1 - other, other])
    assert strategy.client_model(3, global_state) is global_state  # never seen: the global state
    # resume: the server's memory of every client's model is its state
    restored = FedAMP(temperature=1.0, self_weight_floor=0.5)
    restored.load_state_dict(strategy.state_dict())
    for cid in range(3):
        torch.testing.assert_close(
            restored.client_model(cid, global_state)["w"], strategy.client_model(cid, global_state)["w"]
        )


def test_proximal_pull_towards_the_personalized_model_is_optional():
    assert type(FedAMP().local_correction({}, {}, {})) is LocalCorrection
    assert isinstance(FedAMP(prox_mu=0.1).local_correction({"w": torch.zeros(1)}, {}, {}), ProximalCorrection)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": 0.0}, "federation.strategy.temperature must be > 0, got 0.0"),
        ({"self_weight_floor": 1.5}, r"federation.strategy.self_weight_floor must be in \[0, 1\], got 1.5"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FedAMP(**kwargs)
