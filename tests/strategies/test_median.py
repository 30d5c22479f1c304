import io

import pytest
import torch

from lightning_fed.strategies import AggregationError, ClientUpdate, CoordinateMedian, FedAvg, available_strategies

X = {"w": torch.tensor([0.0, 0.0]), "b": torch.zeros(1, 1)}


def _updates(rows, sizes=None):
    sizes = sizes or [1] * len(rows)
    return [
        ClientUpdate(i, n, {"w": torch.tensor(w), "b": torch.tensor([[b]])})
        for i, ((w, b), n) in enumerate(zip(rows, sizes))
    ]


def test_odd_count_hand_values_ignore_num_examples():
    # |D_k| = 1, 100, 1: the median is unweighted, so client 1's size does not matter.
    ups = _updates([([1.0, 5.0], 7.0), ([2.0, -1.0], -3.0), ([4.0, 0.0], 2.0)], sizes=[1, 100, 1])
    out = CoordinateMedian().aggregate(X, ups)
    # w[0]: sorted 1, 2, 4 -> 2;  w[1]: sorted -1, 0, 5 -> 0;  b: sorted -3, 2, 7 -> 2
    torch.testing.assert_close(out["w"], torch.tensor([2.0, 0.0]))
    torch.testing.assert_close(out["b"], torch.tensor([[2.0]]))


def test_even_count_is_the_mean_of_the_two_middle_values():
    ups = _updates([([1.0, 5.0], 7.0), ([2.0, -1.0], -3.0), ([4.0, 0.0], 2.0), ([10.0, 3.0], 0.0)])
    out = CoordinateMedian().aggregate(X, ups)
    # w[0]: 1, 2, 4, 10 -> (2 + 4) / 2 = 3;  w[1]: -1, 0, 3, 5 -> (0 + 3) / 2 = 1.5
    # b: -3, 0, 2, 7 -> (0 + 2) / 2 = 1
    torch.testing.assert_close(out["w"], torch.tensor([3.0, 1.5]))
    torch.testing.assert_close(out["b"], torch.tensor([[1.0]]))


def test_one_and_two_clients():
    ups = _updates([([1.0, 5.0], 7.0), ([3.0, -1.0], -3.0)])
    torch.testing.assert_close(CoordinateMedian().aggregate(X, ups[:1])["w"], torch.tensor([1.0, 5.0]))
    # two values: their mean, [2, 2]
    torch.testing.assert_close(CoordinateMedian().aggregate(X, ups)["w"], torch.tensor([2.0, 2.0]))


def test_poisoned_client_stays_inside_the_honest_range_while_fedavg_is_moved():
    honest = [([1.0, 2.0], 0.5), ([2.0, 3.0], 1.0), ([3.0, 1.0], 1.5), ([4.0, 0.0], 2.0)]
    poisoned = ([1e6, -1e6], 1e6)  # a 1e6-scaled update
    ups = _updates(honest + [poisoned])
    out = CoordinateMedian().aggregate(X, ups)
    # w[0]: 1, 2, 3, 4, 1e6 -> 3;  w[1]: -1e6, 0, 1, 2, 3 -> 1;  b: 0.5, 1, 1.5, 2, 1e6 -> 1.5
    torch.testing.assert_close(out["w"], torch.tensor([3.0, 1.0]))
    torch.testing.assert_close(out["b"], torch.tensor([[1.5]]))
    honest_w = torch.tensor([w for w, _ in honest])
    assert (out["w"] >= honest_w.min(0).values).all() and (out["w"] <= honest_w.max(0).values).all()
    # FedAvg (uniform): w[0] = (1 + 2 + 3 + 4 + 1e6) / 5 = 200002, w[1] = (6 - 1e6) / 5 = -199998.8
    avg = FedAvg(weighting="uniform").aggregate(X, ups)
    torch.testing.assert_close(avg["w"], torch.tensor([200002.0, -199998.8]))
    assert (avg["w"] - out["w"]).abs().min() > 1e5


def test_keeps_global_dtype_and_device_and_does_not_modify_inputs():
    x = {"w": torch.zeros(2, dtype=torch.bfloat16)}
    ups = [
        ClientUpdate(i, 1, {"w": torch.tensor(v, dtype=torch.bfloat16)}) for i, v in enumerate(([1.0, 4.0], [2.0, 8.0]))
    ]
    before = [u.state["w"].clone() for u in ups]
    out = CoordinateMedian().aggregate(x, ups)
    # (1 + 2) / 2 = 1.5, (4 + 8) / 2 = 6
    assert out["w"].dtype == torch.bfloat16 and out["w"].device.type == "cpu"
    torch.testing.assert_close(out["w"], torch.tensor([1.5, 6.0], dtype=torch.bfloat16))
    out["w"].add_(100)
    for u, b in zip(ups, before):
        torch.testing.assert_close(u.state["w"], b)


def test_zero_and_mismatched_updates_raise():
    with pytest.raises(AggregationError, match="CoordinateMedian: cannot aggregate zero updates"):
        CoordinateMedian().aggregate(X, [])
    bad = ClientUpdate(3, 1, {"w": torch.zeros(2)})
    with pytest.raises(AggregationError, match=r"client 3: .*missing=\['b'\]"):
        CoordinateMedian().aggregate(X, _updates([([1.0, 1.0], 1.0)]) + [bad])


def test_registered_by_name():
    assert available_strategies()["CoordinateMedian"] == ["lightning_fed.strategies.CoordinateMedian"]


def test_state_dict_round_trip():
    ups = _updates([([1.0, 5.0], 7.0), ([2.0, -1.0], -3.0), ([4.0, 0.0], 2.0)])
    a = CoordinateMedian()
    a.setup(X, num_clients=3)
    x = a.aggregate(X, ups)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = CoordinateMedian()
    b.setup(X, num_clients=3)
    b.load_state_dict(torch.load(buffer, weights_only=True))
    out_a, out_b = a.aggregate(x, ups[::-1]), b.aggregate(x, ups[::-1])
    for k in X:
        torch.testing.assert_close(out_a[k], out_b[k], rtol=0, atol=0)


def test_robust_config_selects_the_median():
    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.cli import main

    cli = main(["--config", "configs/robust.yaml", "--trainer.logger=false"], run=False)
    loop = next(c for c in cli.trainer.callbacks if isinstance(c, FederatedLoop))
    assert isinstance(loop.server.strategy, CoordinateMedian) and loop.run.clients_per_round == 3
