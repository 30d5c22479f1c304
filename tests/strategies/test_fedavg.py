import io

import pytest
import torch

from lightning_fed.strategies import AggregationError, ClientUpdate, FedAvg

X = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([[0.0, 4.0]])}


def _updates():
    # Client 0 has |D| = 1, client 1 has |D| = 3; keys in a different order than X on purpose.
    return [
        ClientUpdate(0, 1, {"b": torch.tensor([[4.0, 0.0]]), "w": torch.tensor([3.0, 4.0])}),
        ClientUpdate(1, 3, {"w": torch.tensor([7.0, 0.0]), "b": torch.tensor([[0.0, 8.0]])}),
    ]


def test_num_examples_weighting_hand_values():
    out = FedAvg().aggregate(X, _updates())
    # w: (1 * [3, 4] + 3 * [7, 0]) / 4 = [24, 4] / 4 = [6, 1]
    torch.testing.assert_close(out["w"], torch.tensor([6.0, 1.0]))
    # b: (1 * [4, 0] + 3 * [0, 8]) / 4 = [4, 24] / 4 = [1, 6]
    torch.testing.assert_close(out["b"], torch.tensor([[1.0, 6.0]]))


def test_uniform_weighting_hand_values():
    out = FedAvg(weighting="uniform").aggregate(X, _updates())
    # w: ([3, 4] + [7, 0]) / 2 = [5, 2];  b: ([4, 0] + [0, 8]) / 2 = [2, 4]
    torch.testing.assert_close(out["w"], torch.tensor([5.0, 2.0]))
    torch.testing.assert_close(out["b"], torch.tensor([[2.0, 4.0]]))


def test_server_lr_steps_towards_the_average():
    out = FedAvg(server_lr=0.5).aggregate(X, _updates())
    # w: [1, 2] + 0.5 * ([6, 1] - [1, 2]) = [1, 2] + [2.5, -0.5] = [3.5, 1.5]
    torch.testing.assert_close(out["w"], torch.tensor([3.5, 1.5]))
    # b: [0, 4] + 0.5 * ([1, 6] - [0, 4]) = [0.5, 5]
    torch.testing.assert_close(out["b"], torch.tensor([[0.5, 5.0]]))


def test_average_is_float32_and_aggregate_keeps_global_dtype():
    x = {"w": torch.tensor([1.0, 2.0], dtype=torch.bfloat16)}
    ups = [ClientUpdate(i, 1, {"w": torch.tensor([v, 0.0], dtype=torch.bfloat16)}) for i, v in enumerate((2.0, 4.0))]
    strategy = FedAvg(server_lr=0.5)
    assert strategy.average(ups)["w"].dtype == torch.float32
    out = strategy.aggregate(x, ups)
    # avg = [3, 0]; x + 0.5 * (avg - x) = [1, 2] + [1, -1] = [2, 1]
    assert out["w"].dtype == torch.bfloat16 and out["w"].device.type == "cpu"
    torch.testing.assert_close(out["w"], torch.tensor([2.0, 1.0], dtype=torch.bfloat16))


def test_inputs_are_not_modified():
    x = {k: v.clone() for k, v in X.items()}
    ups = _updates()
    before = [{k: v.clone() for k, v in u.state.items()} for u in ups]
    out = FedAvg(server_lr=0.5).aggregate(x, ups)
    out["w"].add_(100)
    for k in X:
        torch.testing.assert_close(x[k], X[k])
    for u, b in zip(ups, before):
        for k in b:
            torch.testing.assert_close(u.state[k], b[k])


def test_zero_updates_raise():
    with pytest.raises(AggregationError, match="zero updates"):
        FedAvg().aggregate(X, [])


def test_invalid_hyper_parameters():
    with pytest.raises(ValueError, match=r"federation.strategy.weighting must be one of .*'num_examples'.*got 'size'"):
        FedAvg(weighting="size")
    with pytest.raises(ValueError, match="federation.strategy.server_lr must be > 0, got 0"):
        FedAvg(server_lr=0)


def test_state_dict_round_trip():
    rounds = [_updates(), _updates()[::-1], [_updates()[0]]]
    a = FedAvg(server_lr=0.5)
    a.setup(X, num_clients=2)
    x = X
    for ups in rounds[:2]:
        x = a.aggregate(x, ups)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = FedAvg(server_lr=0.5)
    b.setup(X, num_clients=2)
    b.load_state_dict(torch.load(buffer, weights_only=True))
    out_a, out_b = a.aggregate(x, rounds[2]), b.aggregate(x, rounds[2])
    for k in X:
        torch.testing.assert_close(out_a[k], out_b[k], rtol=0, atol=0)
