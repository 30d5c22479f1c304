"""The round's training data at scale: cached |D_k|, and a round loader that touches only the
round's clients but yields exactly the batches of a concatenation of every client's set."""

import pytest
import torch
from torch.utils.data import ConcatDataset, DataLoader

from lightning_fed.datamodules import ClientBatchSampler, PreferenceDataModule, RoundBatchSampler
from lightning_fed.datamodules.client_data import ClientSetView
from lightning_fed.federation.round_plan import FixedPlan, RoundPlan
from lightning_fed.federation.turn import TurnPlan
from lightning_fed.modules.backbone import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("bytes")


def data(tokenizer, num_clients=6, per_client=5):
    dm = PreferenceDataModule(
        num_clients=num_clients,
        synthetic_args={"examples_per_client": per_client},
        batch_size=2,
        val_fraction=0.2,
        seed=3,
    )
    dm.tokenizer = tokenizer
    dm.setup("fit")
    return dm


def concat_batches(dm, turns, round_idx):
    """The layout before the O(N) fix: a ConcatDataset over every client, sizes recomputed."""
    sizes = [len(c.train_set) for c in dm.clients]
    offsets = [sum(sizes[:k]) for k in range(len(sizes))]
    sampler = RoundBatchSampler(turns, offsets, sizes, dm.batch_size, dm.seed, round_idx)
    loader = DataLoader(ConcatDataset([c.train_set for c in dm.clients]), batch_sampler=sampler, collate_fn=dm.collate)
    return list(loader)


def test_client_sizes_cached_and_updated_by_select(tokenizer):
    dm = data(tokenizer)
    before = dm.client_sizes
    assert before == [4] * 6  # 5 pairs, round(0.2 * 5) = 1 held out
    assert dm.client_sizes is before  # no list rebuilt per call
    dm.client(2).select([0, 3])  # a coreset changes |D_2|
    assert dm.client_sizes == [4, 4, 2, 4, 4, 4]
    assert before == [4] * 6  # a list handed out earlier (e.g. the report's) keeps its values
    assert dm.serving.round_offsets() == [0, 4, 8, 10, 14, 18]
    dm.client(2).select(None)
    assert dm.client_sizes == [4] * 6 and dm.serving.round_offsets() == [0, 4, 8, 12, 16, 20]


def test_round_loader_yields_the_concatenated_layout(tokenizer):
    dm = data(tokenizer)
    dm.client(4).select([1, 2, 3])  # sizes differ, so offsets matter
    for round_idx, turns in enumerate([[TurnPlan(1, 3), TurnPlan(4, 2)], [TurnPlan(0, 1), TurnPlan(5, 4)]]):
        dm.connect(FixedPlan(RoundPlan(round_idx, tuple(t.client_id for t in turns), tuple(turns))))
        got = list(loader_at_round(dm, round_idx))
        want = concat_batches(dm, turns, round_idx)
        assert len(got) == len(want) == sum(t.num_batches for t in turns)
        for a, b in zip(got, want):
            assert a.keys() == b.keys()
            assert all(torch.equal(a[k], b[k]) for k in a)
        assert [int(b["client_id"][0]) for b in got] == [t.client_id for t in turns for _ in range(t.num_batches)]


def loader_at_round(dm, round_idx):
    class _Trainer:  # what train_dataloader reads of the Trainer (the round is the plan's)
        global_rank, world_size = 0, 1

    dm.trainer = _Trainer()
    try:
        return dm.train_dataloader()
    finally:
        dm.trainer = None


def test_client_set_view_holds_only_the_given_clients():
    sets = {3: ["c", "d", "e"], 1: ["a", "b"]}
    ds = ClientSetView(sets, offsets=[0, 4, 6, 6])  # client 0: 4 examples, 1: 2, 2: 0, 3: 3
    assert len(ds) == 5
    assert [ds[i] for i in (4, 5, 6, 7, 8)] == ["a", "b", "c", "d", "e"]
    for outside in (0, 3, 9):
        with pytest.raises(IndexError, match=f"index {outside} is not in the set of one of the clients"):
            ds[outside]


@pytest.mark.parametrize("packed", [False, True])
def test_eval_loader_yields_the_concatenated_layout_for_the_planned_clients(tokenizer, packed):
    dm = data(tokenizer, num_clients=7, per_client=6)  # 1 val example per client (round(0.2 * 6))
    dm.client(2).val_set.items.clear()  # a client without validation rows is skipped
    dm.eval_batch_size = 2
    planned = [0, 2, 3, 6]
    dm.eval_plan = lambda: (planned, packed)
    got = list(dm.val_dataloader())
    sets = [c.val_set for c in dm.clients]  # the layout before the O(N) fix: all N sets concatenated
    sizes = [len(s) for s in sets]
    offsets = [sum(sizes[:k]) for k in range(len(sizes))]
    clients = [c for c in planned if sizes[c] > 0]
    sampler = ClientBatchSampler(clients, offsets, sizes, 2, packed)
    want = list(DataLoader(ConcatDataset(sets), batch_sampler=sampler, collate_fn=dm.collate))
    assert len(got) == len(want) == (2 if packed else 3)
    for a, b in zip(got, want):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [c for b in got for c in b["client_id"].tolist()] == [0, 3, 6]


def test_serving_needs_setup_and_a_planner_and_keeps_the_plan_it_laid_out(tokenizer):
    fresh = PreferenceDataModule(num_clients=3, synthetic_args={"examples_per_client": 4})
    with pytest.raises(RuntimeError, match=r"call setup\(\) before asking for clients' loaders or sizes"):
        fresh.val_dataloader()
    dm = data(tokenizer)
    with pytest.raises(RuntimeError, match="needs a FederatedLoop callback on the Trainer to plan rounds"):
        dm.train_dataloader()
    plan = RoundPlan(4, (1, 5), (TurnPlan(5, 2), TurnPlan(1, 1)))
    dm.connect(FixedPlan(plan))
    assert len(list(dm.train_dataloader())) == 3 and dm.plan is plan


def test_eval_loader_looks_up_only_the_planned_clients_sets(tokenizer):
    dm = data(tokenizer, num_clients=50, per_client=5)
    looked_up = []
    dm.eval_plan = lambda: ([7, 31], True)
    loader = dm.serving.eval_loader(lambda client: looked_up.append(client.client_id) or client.val_set, 4)
    assert looked_up == [7, 31]  # not a list of all 50 clients' sets
    assert [c for b in loader for c in b["client_id"].tolist()] == [7, 31]
