import pytest
import torch

from lightning_fed.datamodules.round_sampler import ClientBatchSampler, RoundBatchSampler
from lightning_fed.federation import ClientStateStore, TurnPlan, derive_seed, sample_clients


def test_sample_clients_is_deterministic_without_replacement():
    a = sample_clients(10, 4, seed=3, round_idx=5)
    assert a == sample_clients(10, 4, seed=3, round_idx=5)
    assert len(set(a)) == 4 and all(0 <= c < 10 for c in a)
    rounds = {tuple(sample_clients(10, 4, seed=3, round_idx=r)) for r in range(20)}
    assert len(rounds) > 10  # different rounds sample different clients


def test_sample_clients_is_uniform():
    counts = torch.zeros(5)
    for r in range(2000):
        for c in sample_clients(5, 2, seed=0, round_idx=r):
            counts[c] += 1
    # Each client is expected 2000 * 2/5 = 800 times.
    assert (counts - 800).abs().max() < 80


def test_sample_clients_rejects_bad_count():
    with pytest.raises(ValueError, match="federation.clients_per_round=4 exceeds data.num_clients=3"):
        sample_clients(3, 4, 0, 0)


def test_derive_seed_depends_on_every_part():
    assert derive_seed(1, 2, 3) == derive_seed(1, 2, 3)
    assert len({derive_seed(1, 2, 3), derive_seed(1, 3, 2), derive_seed(2, 2, 3), derive_seed(1, 2)}) == 4


def test_round_batch_sampler_lays_out_turns():
    sizes, offsets = [5, 2, 7], [0, 5, 7]
    turns = [TurnPlan(0, 3), TurnPlan(2, 2)]
    batches = list(RoundBatchSampler(turns, offsets, sizes, batch_size=4, seed=0, round_idx=1))
    assert len(batches) == 5 == len(RoundBatchSampler(turns, offsets, sizes, 4, 0, 1))
    assert all(0 <= i < 5 for b in batches[:3] for i in b)  # client 0's rows only
    assert all(7 <= i < 14 for b in batches[3:] for i in b)  # client 2's rows only
    assert all(len(b) == 4 for b in batches)
    # The first pass over client 0 is a permutation of all its rows.
    assert sorted(batches[0] + batches[1][:1]) == [0, 1, 2, 3, 4]
    again = list(RoundBatchSampler(turns, offsets, sizes, batch_size=4, seed=0, round_idx=1))
    assert batches == again
    other = list(RoundBatchSampler(turns, offsets, sizes, batch_size=4, seed=0, round_idx=2))
    assert batches != other


def test_round_batch_sampler_small_client_uses_whole_data():
    batches = list(RoundBatchSampler([TurnPlan(1, 2)], [0, 5], [5, 2], batch_size=4, seed=0, round_idx=0))
    assert [sorted(b) for b in batches] == [[5, 6], [5, 6]]


def test_client_batch_sampler_never_mixes_clients():
    batches = list(ClientBatchSampler([0, 2], [0, 3, 4], [3, 1, 5], batch_size=2))
    assert batches == [[0, 1], [2], [4, 5], [6, 7], [8]]


def test_store_offloads_past_budget(tmp_path):
    store = ClientStateStore(max_memory_bytes=3 * 4 * 10, offload_dir=str(tmp_path))
    for cid in range(5):
        store.put(cid, {"w": torch.full((10,), float(cid))}, {"c": torch.zeros(10)})
    assert store.nbytes_in_memory <= 3 * 4 * 10 or len(store._mem) == 1
    assert len(list(tmp_path.iterdir())) >= 3
    for cid in range(5):
        assert cid in store
        assert store.get(cid)["personal"]["w"][0].item() == cid
    full = store.state_dict()
    assert sorted(full) == list(range(5))
    fresh = ClientStateStore()
    fresh.load_state_dict(full)
    assert fresh.get(3)["personal"]["w"][0].item() == 3
