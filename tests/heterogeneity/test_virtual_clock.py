import pytest
import torch

from lightning_fed.heterogeneity import (
    Arrival,
    AsyncRoundSimulator,
    ClientProfile,
    Report,
    SyncRoundSimulator,
    profiles_from_distribution,
)
from lightning_fed.strategies import ClientUpdate, FedBuff

# local_steps 5: clients finish at 5, 5, 50 and 10 virtual seconds
PROFILES = [ClientProfile(1.0), ClientProfile(1.0), ClientProfile(10.0), ClientProfile(2.0)]


def test_round_closes_at_the_target_and_discards_the_surplus():
    sim = SyncRoundSimulator(PROFILES, local_steps=5, deadline=20.0)
    out = sim.run_round(0, [0, 1, 2, 3], target=2, start=100.0)
    assert out.reports == [Report(0, 5, 105.0), Report(1, 5, 105.0)] and out.end == 105.0
    assert out.late == [2, 3] and out.unavailable == [] and out.dropped == []
    out = sim.run_round(0, [0, 1, 2, 3], target=3)
    assert [r.client for r in out.reports] == [0, 1, 3] and out.end == 10.0 and out.late == [2]


def test_deadline_and_partial_work():
    out = SyncRoundSimulator(PROFILES, local_steps=5, deadline=20.0).run_round(0, [0, 1, 2, 3], target=4)
    assert [r.client for r in out.reports] == [0, 1, 3] and out.end == 20.0 and out.late == [2]
    sim = SyncRoundSimulator(PROFILES, local_steps=5, deadline=20.0, partial_work=True)
    out = sim.run_round(0, [0, 1, 2, 3], target=4)
    assert out.reports[-1] == Report(2, 2, 20.0, partial=True)  # floor(20 / 10) of its 5 steps
    assert out.late == []
    strict = SyncRoundSimulator(PROFILES, local_steps=5, deadline=20.0, partial_work=True, min_partial_steps=3)
    assert strict.run_round(0, [0, 1, 2, 3], target=4).late == [2]
    # no deadline: the server waits for the slow client
    assert SyncRoundSimulator(PROFILES, local_steps=5).run_round(0, [0, 1, 2, 3], target=4).end == 50.0


def test_unavailable_and_dropped_clients():
    profiles = [ClientProfile(1.0, availability=0.0), ClientProfile(1.0, dropout=1.0), ClientProfile(1.0)]
    out = SyncRoundSimulator(profiles, local_steps=1).run_round(3, [0, 1, 2], target=3)
    assert out.unavailable == [0] and out.dropped == [1] and [r.client for r in out.reports] == [2]


def test_over_selection_count_and_bad_settings():
    assert SyncRoundSimulator(PROFILES, 1, over_selection=0.3).num_to_select(10) == 13
    assert SyncRoundSimulator(PROFILES, 1).num_to_select(10) == 10
    with pytest.raises(ValueError, match=r"^SyncRoundSimulator: local_steps must be >= 1, got 0; deadline must be > 0"):
        SyncRoundSimulator(PROFILES, 0, deadline=0.0)
    with pytest.raises(ValueError, match=r"concurrency must be in \[1, 4\]"):
        AsyncRoundSimulator(PROFILES, 1, concurrency=5)


def test_draws_are_deterministic_per_round():
    profiles = profiles_from_distribution(20, availability=0.5, dropout=0.2, seed=1)
    a = SyncRoundSimulator(profiles, 3, seed=9).run_round(7, range(20), target=20)
    b = SyncRoundSimulator(profiles, 3, seed=9).run_round(7, range(20), target=20)
    c = SyncRoundSimulator(profiles, 3, seed=9).run_round(8, range(20), target=20)
    assert a == b and a != c and a.unavailable and a.dropped


def test_async_arrivals_by_hand():
    # all three always training (concurrency = N): a finished client restarts at once
    sim = AsyncRoundSimulator([ClientProfile(1.0), ClientProfile(2.0), ClientProfile(10.0)], 1, concurrency=3)
    got = [sim.next_arrival(v) for v in (0, 0, 1, 1)]
    assert got == [
        Arrival(0, 0.0, 1.0, 0),
        Arrival(0, 1.0, 2.0, 0),  # ties at t = 2 go to the lower client id
        Arrival(1, 0.0, 2.0, 0),
        Arrival(0, 2.0, 3.0, 1),  # restarted at t = 2 from version 1
    ]


def test_async_with_fedbuff_staleness_and_resume():
    """The slow client's update arrives many versions late and is discounted by 1 / sqrt(1 + tau)."""
    profiles = [ClientProfile(1.0), ClientProfile(1.0), ClientProfile(10.0)]
    x = {"w": torch.zeros(1)}

    def run(sim, strategy, x, n):
        stale = []
        for _ in range(n):
            a = sim.next_arrival(strategy.version)
            stale.append(strategy.version - a.start_version)
            new = strategy.submit(x, ClientUpdate(a.client, 1, {"w": x["w"] + 1}), x, a.start_version)
            x = new if new is not None else x
        return x, stale

    sim, fb = AsyncRoundSimulator(profiles, 1, concurrency=3, seed=2), FedBuff(buffer_size=2)
    x_all, stale_all = run(sim, fb, x, 24)
    assert max(stale_all) >= 4  # the slow client (10 s per task) lags several flushes
    sim2, fb2 = AsyncRoundSimulator(profiles, 1, concurrency=3, seed=2), FedBuff(buffer_size=2)
    x_half, stale_a = run(sim2, fb2, x, 11)
    sim3, fb3 = AsyncRoundSimulator(profiles, 1, concurrency=3), FedBuff(buffer_size=2)
    sim3.load_state_dict(sim2.state_dict())
    fb3.load_state_dict(fb2.state_dict())
    sim3.seed = 2  # the seed is configuration, not state
    x_rest, stale_b = run(sim3, fb3, x_half, 13)
    assert stale_a + stale_b == stale_all
    torch.testing.assert_close(x_rest["w"], x_all["w"])


def test_async_dropouts_are_counted_and_replaced():
    profiles = [ClientProfile(1.0, dropout=0.5) for _ in range(4)]
    sim = AsyncRoundSimulator(profiles, 2, concurrency=2, seed=0)
    arrivals = [sim.next_arrival(0) for _ in range(20)]
    assert sim.dropped > 0 and len(arrivals) == 20
    assert all(b.time >= a.time for a, b in zip(arrivals, arrivals[1:]))  # virtual time never goes back
    with pytest.raises(RuntimeError, match="no client is training and none is available"):
        AsyncRoundSimulator([ClientProfile(1.0, availability=0.0)], 1, concurrency=1).next_arrival(0)
