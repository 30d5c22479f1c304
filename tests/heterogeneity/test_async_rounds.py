"""FedBuff's asynchronous rounds in the loop: arrivals from the virtual clock, each client trained
from the model of the version it was dispatched at, staleness-discounted, resumable."""

import pytest
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.federation import RoundHook
from lightning_fed.heterogeneity import AsyncArrivals, AsyncRoundSimulator, profiles_from_distribution
from lightning_fed.strategies import ClientUpdate, FedAvg, FedBuff
from tests.helpers.runs import fit, preference_data, tiny_dpo

PROFILE = {"slow_fraction": 0.5, "slow_factor": 3.0}


class Recorder(RoundHook):
    """What each client started from, and the global state of every FedBuff version."""

    def __init__(self):
        self.received, self.versions = {}, {}

    def setup_server(self, server, context, module):
        self.versions.setdefault(0, {k: v.clone() for k, v in server.global_state.items()})

    def on_client_start(self, turn, trainer, module, client_id):
        self.received[(turn.round_idx, client_id)] = {k: v.clone() for k, v in turn.received.items()}

    def after_aggregate(self, server, trainer, module, round_idx):
        self.versions[server.strategy.version] = {k: v.clone() for k, v in server.global_state.items()}


def _run(tmp_path, name, rounds=4, ckpt_path=None, hooks=()):
    hook = AsyncArrivals(concurrency=3, local_steps=2, **PROFILE)
    loop = FederatedLoop(
        rounds=rounds, clients_per_round=2, local_steps=2, seed=0, strategy=FedBuff(buffer_size=2), hooks=[hook, *hooks]
    )
    fit(tiny_dpo(), preference_data(), loop, str(tmp_path / name), ckpt_path=ckpt_path)
    return loop


def test_fedbuff_keeps_and_sends_the_model_each_client_started_from():
    """Hand values: buffer 2; client 0 from version 0, client 1 from version 0 -> step to version 1;
    client 2 still holds version 0, so it is sent version 0's model and weighs 1/sqrt(2)."""
    fb = FedBuff(buffer_size=2)
    x0 = {"w": torch.tensor([0.0])}
    fb.remember(x0)
    for c in (0, 1, 2):
        fb.assign(c, 0)
    x1 = fb.aggregate(
        x0, [ClientUpdate(0, 1, {"w": torch.tensor([2.0])}), ClientUpdate(1, 1, {"w": torch.tensor([4.0])})]
    )
    assert x1["w"].item() == 3.0 and fb.version == 1  # (2 + 4) / 2
    fb.remember(x1)
    assert fb.client_model(2, x1)["w"].item() == 0.0 and fb.client_model(3, x1)["w"].item() == 3.0
    fb.assign(3, 1)
    x2 = fb.aggregate(
        x1, [ClientUpdate(2, 1, {"w": torch.tensor([2.0])}), ClientUpdate(3, 1, {"w": torch.tensor([5.0])})]
    )
    assert x2["w"].item() == pytest.approx(3.0 + (2.0 / 2**0.5 + 2.0) / 2)  # staleness 1 and 0
    fb.keep_versions({2})
    assert set(fb.models) == set() and fb.start_versions == {}


def test_the_loop_trains_the_clock_s_arrivals_from_their_start_versions(tmp_path):
    recorder = Recorder()
    loop = _run(tmp_path, "run", hooks=[recorder])
    sim = AsyncRoundSimulator(profiles_from_distribution(4, **PROFILE), 2, 3, 0)
    version, stale, pending = 0, 0, None
    for record in loop.server.report.history:
        r = record["round"] - 1
        arrivals = []
        while len(arrivals) < 2:
            a, pending = pending or sim.next_arrival(version), None
            if any(a.client == b.client for b in arrivals):
                pending = a
                break
            arrivals.append(a)
        assert record["clients"] == [a.client for a in arrivals]  # in arrival order
        assert record["aggregated"] == sorted(a.client for a in arrivals)
        for a in arrivals:
            stale += version - a.start_version
            got, want = recorder.received[(r, a.client)], recorder.versions[a.start_version]
            assert all(torch.equal(got[k], want[k]) for k in want)
        version += len(arrivals) == 2
    assert stale >= 1  # some client trained from an older version: the test is not trivial
    assert loop.server.strategy.version == version


def test_async_run_resumes_exactly(tmp_path):
    straight = _run(tmp_path, "straight", rounds=4)
    _run(tmp_path, "first", rounds=2)
    resumed = _run(tmp_path, "resumed", rounds=4, ckpt_path=str(tmp_path / "first" / "ckpt" / "last.ckpt"))
    assert [r["clients"] for r in resumed.server.report.history] == [
        r["clients"] for r in straight.server.report.history
    ]
    for k, v in straight.server.global_state.items():
        torch.testing.assert_close(resumed.server.global_state[k], v, rtol=1e-5, atol=1e-7)


def test_async_arrivals_needs_fedbuff(tmp_path):
    loop = FederatedLoop(
        rounds=1, clients_per_round=2, local_steps=1, seed=0, strategy=FedAvg(), hooks=[AsyncArrivals()]
    )
    with pytest.raises(ValueError) as info:
        fit(tiny_dpo(), preference_data(), loop, str(tmp_path))
    assert str(info.value) == "federation.hooks: AsyncArrivals needs federation.strategy=FedBuff, got FedAvg"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"arrivals": "sometimes"}, "arrivals must be one of ('virtual', 'real'), got 'sometimes'"),
        ({"concurrency": 0}, "concurrency must be >= 1, got 0"),
    ],
)
def test_bad_async_arrivals_settings_name_the_field(kwargs, message):
    with pytest.raises(ValueError) as info:
        AsyncArrivals(**kwargs)
    field = "federation.hooks[]." if "concurrency" in kwargs else "federation.hooks: AsyncArrivals: "  # hook_rules.py
    assert str(info.value) == f"{field}{message}"


def test_buffer_size_below_min_clients_is_one_line_error(tmp_path):
    """A virtual-arrivals step takes exactly ``buffer_size`` arrivals: below ``min_clients`` every
    round fails (red team 17 B11: ``round 1: only 2 of 2 clients returned a valid update``)."""
    loop = FederatedLoop(
        rounds=1,
        clients_per_round=3,
        min_clients=3,
        local_steps=1,
        seed=0,
        strategy=FedBuff(buffer_size=2),
        hooks=[AsyncArrivals(concurrency=3, local_steps=1, **PROFILE)],
    )
    with pytest.raises(ValueError) as info:
        fit(tiny_dpo(), preference_data(), loop, str(tmp_path))
    assert str(info.value) == (
        "federation.strategy.buffer_size=2 is below federation.min_clients=3: a FedBuff step aggregates"
        " buffer_size updates, so every round would fail"
    )
    assert list(tmp_path.iterdir()) == []
