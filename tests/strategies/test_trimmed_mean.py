import io

import pytest
import torch

from lightning_fed.option_rules import TRIMMED_MEAN
from lightning_fed.strategies import AggregationError, ClientUpdate, FedAvg, TrimmedMean, available_strategies

X = {"w": torch.tensor([0.0, 0.0])}


def _updates(rows, sizes=None):
    sizes = sizes or [1] * len(rows)
    return [ClientUpdate(i, n, {"w": torch.tensor(w)}) for i, (w, n) in enumerate(zip(rows, sizes))]


EVEN = [[1.0, 5.0], [2.0, -1.0], [4.0, 0.0], [10.0, 3.0]]
HONEST = [[1.0, 2.0], [2.0, 3.0], [3.0, 1.0], [4.0, 0.0]]


def test_even_count_hand_values_ignore_num_examples():
    # trim 0.25 of 4: b = floor(1.0) = 1 value dropped at each end; |D_k| is ignored.
    out = TrimmedMean(trim=0.25).aggregate(X, _updates(EVEN, sizes=[1, 50, 1, 7]))
    # w[0]: 1, [2, 4], 10 -> 3;  w[1]: -1, [0, 3], 5 -> 1.5
    torch.testing.assert_close(out["w"], torch.tensor([3.0, 1.5]))


def test_odd_count_hand_values():
    ups = _updates(HONEST + [[7.0, 6.0]])
    # trim 0.2 of 5: b = 1. w[0]: 1, [2, 3, 4], 7 -> 3;  w[1]: 0, [1, 2, 3], 6 -> 2
    torch.testing.assert_close(TrimmedMean(trim=0.2).aggregate(X, ups)["w"], torch.tensor([3.0, 2.0]))
    # trim 0.4 of 5: b = 2, one value left: the median, [3, 2]
    torch.testing.assert_close(TrimmedMean(trim=0.4).aggregate(X, ups)["w"], torch.tensor([3.0, 2.0]))
    # trim 0.49 of 3: b = floor(1.47) = 1. w[0]: 1, [2], 3;  w[1]: 1, [2], 3
    torch.testing.assert_close(TrimmedMean(trim=0.49).aggregate(X, ups[:3])["w"], torch.tensor([2.0, 2.0]))


def test_trim_zero_is_the_uniform_mean():
    ups = _updates(EVEN, sizes=[1, 50, 1, 7])
    # w: ([1, 5] + [2, -1] + [4, 0] + [10, 3]) / 4 = [17, 7] / 4 = [4.25, 1.75]
    out = TrimmedMean(trim=0).aggregate(X, ups)
    torch.testing.assert_close(out["w"], torch.tensor([4.25, 1.75]))
    torch.testing.assert_close(out["w"], FedAvg(weighting="uniform").aggregate(X, ups)["w"])


def test_poisoned_client_stays_inside_the_honest_range_while_fedavg_is_moved():
    ups = _updates(HONEST + [[1e6, -1e6]])  # one 1e6-scaled update among five
    out = TrimmedMean(trim=0.2).aggregate(X, ups)
    # w[0]: 1, [2, 3, 4], 1e6 -> 3;  w[1]: -1e6, [0, 1, 2], 3 -> 1
    torch.testing.assert_close(out["w"], torch.tensor([3.0, 1.0]))
    honest = torch.tensor(HONEST)
    assert (out["w"] >= honest.min(0).values).all() and (out["w"] <= honest.max(0).values).all()
    # FedAvg (|D_k| all 1): [(10 + 1e6) / 5, (6 - 1e6) / 5] = [200002, -199998.8]
    avg = FedAvg().aggregate(X, ups)
    torch.testing.assert_close(avg["w"], torch.tensor([200002.0, -199998.8]))
    assert (avg["w"] - out["w"]).abs().min() > 1e5


def test_too_few_updates_for_the_trim_is_an_error_not_a_silent_mean():
    # trim 0.2 of 4: floor(0.8) = 0 would trim nothing; 5 updates are needed.
    with pytest.raises(AggregationError) as err:
        TrimmedMean(trim=0.2).aggregate(X, _updates(HONEST))
    message = str(err.value)
    assert "\n" not in message
    assert "`trim`=0.2 of 4 updates trims nothing" in message and "at least 5 updates" in message


def test_exact_products_are_not_floored_down():
    # 0.29 * 100 is 28.999... in floating point; b must still be 29 (71 - 29 = 42 values kept).
    ups = [ClientUpdate(i, 1, {"w": torch.tensor([float(i), 0.0])}) for i in range(100)]
    out = TrimmedMean(trim=0.29).aggregate(X, ups)
    # kept values 29..70, mean (29 + 70) / 2 = 49.5
    torch.testing.assert_close(out["w"], torch.tensor([49.5, 0.0]))


@pytest.mark.parametrize("trim", [-0.1, 0.5, 0.7, float("nan"), True, "0.1"])
def test_invalid_trim_is_a_one_line_error_naming_trim_and_value(trim):
    with pytest.raises(ValueError) as err:
        TrimmedMean(trim=trim)
    assert str(err.value) == TRIMMED_MEAN[0].problem(trim)  # lightning_fed/option_rules.py
    assert str(err.value).startswith("federation.strategy.trim must be ")


def test_keeps_global_dtype_and_rejects_mismatched_updates():
    x = {"w": torch.zeros(2, dtype=torch.bfloat16)}
    ups = [ClientUpdate(i, 1, {"w": torch.tensor(v, dtype=torch.bfloat16)}) for i, v in enumerate(EVEN)]
    out = TrimmedMean(trim=0.25).aggregate(x, ups)
    assert out["w"].dtype == torch.bfloat16 and out["w"].device.type == "cpu"
    torch.testing.assert_close(out["w"], torch.tensor([3.0, 1.5], dtype=torch.bfloat16))
    with pytest.raises(AggregationError, match="TrimmedMean: cannot aggregate zero updates"):
        TrimmedMean(trim=0.0).aggregate(X, [])
    with pytest.raises(AggregationError, match=r"client 0: shape mismatch"):
        TrimmedMean(trim=0.0).aggregate(X, [ClientUpdate(0, 1, {"w": torch.zeros(3)})])


def test_registered_by_name():
    assert available_strategies()["TrimmedMean"] == ["lightning_fed.strategies.TrimmedMean"]


def test_state_dict_round_trip():
    ups = _updates(HONEST + [[1e6, -1e6]])
    a = TrimmedMean(trim=0.2)
    a.setup(X, num_clients=5)
    x = a.aggregate(X, ups)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = TrimmedMean(trim=0.2)
    b.setup(X, num_clients=5)
    b.load_state_dict(torch.load(buffer, weights_only=True))
    out_a, out_b = a.aggregate(x, ups[::-1]), b.aggregate(x, ups[::-1])
    torch.testing.assert_close(out_a["w"], out_b["w"], rtol=0, atol=0)


def test_selected_from_yaml_and_command_line():
    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.cli import main

    args = ["--config", "configs/robust.yaml", "--trainer.logger=false", "--federation.strategy=TrimmedMean"]
    cli = main(args + ["--federation.strategy.trim=0.34", "--federation.min_clients=3"], run=False)
    loop = next(c for c in cli.trainer.callbacks if isinstance(c, FederatedLoop))
    assert (
        isinstance(loop.server.strategy, TrimmedMean)
        and loop.server.strategy.trim == 0.34
        and loop.server.min_clients == 3
    )
