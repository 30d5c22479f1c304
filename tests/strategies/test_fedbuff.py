import math

import pytest
import torch

from lightning_fed.strategies import AggregationError, ClientUpdate, FedAvg, FedBuff, staleness_weight

X0 = {"w": torch.tensor([0.0, 0.0])}


def test_staleness_weights_by_hand():
    assert staleness_weight(0) == 1.0
    assert staleness_weight(3) == 0.5  # 1 / sqrt(4)
    assert staleness_weight(8) == pytest.approx(1 / 3)
    assert staleness_weight(1) == pytest.approx(1 / math.sqrt(2))
    assert staleness_weight(8, "constant") == 1.0
    with pytest.raises(ValueError, match="staleness must be >= 0"):
        staleness_weight(-1)


def test_buffer_flush_by_hand():
    s = FedBuff(buffer_size=2, server_lr=0.5)
    s.load_state_dict({"version": 3})
    x = {"w": torch.tensor([1.0, 1.0])}
    # fresh (tau 0): Delta = [2, 0]; stale (started at version 0, tau 3, s = 1/2): Delta = [0, 4] -> [0, 2]
    assert s.submit(x, ClientUpdate(0, 1, {"w": torch.tensor([3.0, 1.0])}), x, 3) is None
    out = s.submit(x, ClientUpdate(1, 1, {"w": torch.tensor([0.0, 4.0])}), X0, 0)
    # x + 0.5 * ([2, 0] + [0, 2]) / 2
    torch.testing.assert_close(out["w"], torch.tensor([1.5, 1.5]))
    assert s.version == 4 and s.buffered == 0 and s.buffer == {}


def test_max_staleness_drops_and_counts():
    s = FedBuff(buffer_size=1, max_staleness=1)
    s.load_state_dict({"version": 5})
    assert s.submit(X0, ClientUpdate(0, 1, {"w": torch.ones(2)}), X0, 3) is None
    assert s.dropped == 1 and s.buffered == 0
    with pytest.raises(AggregationError, match="start version 6 is ahead of 5"):
        s.submit(X0, ClientUpdate(0, 1, {"w": torch.ones(2)}), X0, 6)


def test_synchronous_with_k_equal_round_size_is_uniform_fedavg():
    ups = [ClientUpdate(0, 1, {"w": torch.tensor([2.0, 0.0])}), ClientUpdate(1, 9, {"w": torch.tensor([0.0, 4.0])})]
    torch.testing.assert_close(
        FedBuff(buffer_size=2).aggregate(X0, ups)["w"], FedAvg("uniform").aggregate(X0, ups)["w"]
    )
    s = FedBuff(buffer_size=3)
    torch.testing.assert_close(s.aggregate(X0, ups)["w"], X0["w"])  # buffer not full: model unchanged
    assert s.buffered == 2 and s.version == 0


def test_resume_between_flushes():
    ups = [ClientUpdate(i, 1, {"w": torch.tensor([float(i), 1.0])}) for i in range(3)]
    straight = FedBuff(buffer_size=3, server_lr=0.7)
    for u in ups[:2]:
        straight.submit(X0, u, X0, 0)
    resumed = FedBuff(buffer_size=3, server_lr=0.7)
    resumed.load_state_dict(straight.state_dict())
    a = straight.submit(X0, ups[2], X0, 0)
    b = resumed.submit(X0, ups[2], X0, 0)
    torch.testing.assert_close(a["w"], b["w"])
    torch.testing.assert_close(a["w"], torch.tensor([0.7, 0.7]))  # 0.7 * ([0, 1] + [1, 1] + [2, 1]) / 3


def test_bad_settings_name_each_field():
    with pytest.raises(
        ValueError, match=r"federation.strategy.buffer_size must be >= 1, got 0; federation.strategy.staleness must be"
    ):
        FedBuff(buffer_size=0, staleness="linear")
