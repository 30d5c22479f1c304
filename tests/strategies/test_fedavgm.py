import io

import pytest
import torch

from lightning_fed.strategies import AggregationError, ClientUpdate, FedAvg, FedAvgM

X0 = {"w": torch.tensor([1.0, 2.0])}


def _round(*states):
    return [ClientUpdate(i, 2, {"w": torch.tensor(s)}) for i, s in enumerate(states)]


def test_two_rounds_hand_values():
    strategy = FedAvgM(server_lr=0.5, momentum=0.5)
    strategy.setup(X0, num_clients=2)
    torch.testing.assert_close(strategy.state_dict()["velocity"]["w"], torch.zeros(2))

    # Round 1: avg = ([3, 4] + [1, 2]) / 2 = [2, 3];  d = x - avg = [1, 2] - [2, 3] = [-1, -1]
    #          v = 0.5 * 0 + d = [-1, -1];  x = [1, 2] - 0.5 * [-1, -1] = [1.5, 2.5]
    x1 = strategy.aggregate(X0, _round([3.0, 4.0], [1.0, 2.0]))
    torch.testing.assert_close(x1["w"], torch.tensor([1.5, 2.5]))
    torch.testing.assert_close(strategy.velocity["w"], torch.tensor([-1.0, -1.0]))

    # Round 2: avg = ([4, 2] + [2, 2]) / 2 = [3, 2];  d = [1.5, 2.5] - [3, 2] = [-1.5, 0.5]
    #          v = 0.5 * [-1, -1] + [-1.5, 0.5] = [-2, 0];  x = [1.5, 2.5] - 0.5 * [-2, 0] = [2.5, 2.5]
    x2 = strategy.aggregate(x1, _round([4.0, 2.0], [2.0, 2.0]))
    torch.testing.assert_close(x2["w"], torch.tensor([2.5, 2.5]))
    torch.testing.assert_close(strategy.velocity["w"], torch.tensor([-2.0, 0.0]))


def test_zero_momentum_is_fedavg_with_server_lr():
    ups = _round([3.0, 4.0], [1.0, 2.0])
    expected = FedAvg(server_lr=0.5).aggregate(X0, ups)["w"]
    strategy = FedAvgM(server_lr=0.5, momentum=0.0)
    strategy.setup(X0, num_clients=2)
    torch.testing.assert_close(strategy.aggregate(X0, ups)["w"], expected)


def test_keeps_dtype_and_inputs():
    x = {"w": torch.tensor([1.0, 2.0], dtype=torch.bfloat16)}
    ups = [ClientUpdate(0, 1, {"w": torch.tensor([3.0, 4.0], dtype=torch.bfloat16)})]
    strategy = FedAvgM()
    strategy.setup(x, num_clients=1)
    out = strategy.aggregate(x, ups)
    assert out["w"].dtype == torch.bfloat16
    assert strategy.velocity["w"].dtype == torch.float32
    torch.testing.assert_close(x["w"], torch.tensor([1.0, 2.0], dtype=torch.bfloat16))


def test_zero_updates_raise():
    with pytest.raises(AggregationError):
        FedAvgM().aggregate(X0, [])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"momentum": 1.0}, "momentum"),
        ({"momentum": -0.1}, "momentum"),
        ({"server_lr": 0.0}, "server_lr"),
        ({"weighting": "x"}, "weighting"),
    ],
)
def test_invalid_hyper_parameters(kwargs, name):
    with pytest.raises(ValueError, match=f"^federation.strategy.{name} must"):
        FedAvgM(**kwargs)


def test_state_dict_round_trip():
    rounds = [_round([3.0, 4.0], [1.0, 2.0]), _round([4.0, 2.0], [2.0, 2.0]), _round([0.0, 1.0], [5.0, 5.0])]
    a = FedAvgM(server_lr=0.7, momentum=0.9)
    a.setup(X0, num_clients=2)
    x = X0
    for ups in rounds[:2]:
        x = a.aggregate(x, ups)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = FedAvgM(server_lr=0.7, momentum=0.9)
    b.setup(X0, num_clients=2)
    b.load_state_dict(torch.load(buffer, weights_only=True))
    torch.testing.assert_close(a.aggregate(x, rounds[2])["w"], b.aggregate(x, rounds[2])["w"], rtol=0, atol=0)
    torch.testing.assert_close(a.velocity["w"], b.velocity["w"], rtol=0, atol=0)


def test_openfedllm_reference_hand_values():
    """``reference="openfedllm"``: first v = d, then v <- beta v + (1 - beta) d."""
    strategy = FedAvgM(server_lr=0.5, momentum=0.5, reference="openfedllm")
    strategy.setup(X0, num_clients=2)
    # Round 1 as Hsu: d = [-1, -1], v = d, x = [1, 2] - 0.5 * [-1, -1] = [1.5, 2.5]
    x1 = strategy.aggregate(X0, _round([3.0, 4.0], [1.0, 2.0]))
    torch.testing.assert_close(x1["w"], torch.tensor([1.5, 2.5]))
    # Round 2: d = [-1.5, 0.5]; v = 0.5 * [-1, -1] + (1 - 0.5) * [-1.5, 0.5] = [-1.25, -0.25]
    #          x = [1.5, 2.5] - 0.5 * [-1.25, -0.25] = [2.125, 2.625]   (Hsu: [2.5, 2.5])
    x2 = strategy.aggregate(x1, _round([4.0, 2.0], [2.0, 2.0]))
    torch.testing.assert_close(strategy.velocity["w"], torch.tensor([-1.25, -0.25]))
    torch.testing.assert_close(x2["w"], torch.tensor([2.125, 2.625]))
    assert strategy.state_dict()["step"] == 2


def test_references_differ_by_one_over_one_minus_beta_at_steady_state():
    """A constant pseudo-gradient d = 1 at beta = 0.9: Hsu's v = 1, 1.9, 2.71 (-> 10);
    OpenFedLLM's v = 1, 0.9 + 0.1 = 1, 1 (stays d)."""
    velocities = {}
    for reference in ("hsu", "openfedllm"):
        strategy = FedAvgM(momentum=0.9, reference=reference)
        x = {"w": torch.tensor([0.0], dtype=torch.float64)}
        strategy.setup(x, num_clients=1)
        velocities[reference] = []
        for _ in range(3):
            x = strategy.aggregate(x, [ClientUpdate(0, 1, {"w": x["w"] - 1.0})])  # avg = x - 1: d = 1
            velocities[reference].append(strategy.velocity["w"].item())
    assert velocities["hsu"] == pytest.approx([1.0, 1.9, 2.71])
    assert velocities["openfedllm"] == pytest.approx([1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"federation.strategy.reference must be one of \('hsu', 'openfedllm'\)"):
        FedAvgM(reference="flower")
