"""Groups of turns: how a round is cut, and the batches each group's steps take."""

from __future__ import annotations

from lightning_fed.batching.group_size import expected_clients, group_turns
from lightning_fed.datamodules.round_sampler import RoundBatchSampler
from lightning_fed.federation.round_plan import GroupPlan, RoundPlan
from lightning_fed.federation.turn import TurnPlan


def test_groups_hold_at_most_k_turns_of_equal_length_in_order():
    turns = [TurnPlan(0, 3), TurnPlan(1, 3), TurnPlan(2, 3), TurnPlan(3, 1), TurnPlan(4, 3), TurnPlan(5, 3)]
    groups = group_turns(turns, 2)
    assert [[t.client_id for t in g] for g in groups] == [[0, 1], [2], [3], [4, 5]]
    plan = RoundPlan(0, (0, 1, 2, 3, 4, 5), tuple(turns), groups=groups)
    assert plan.units == (GroupPlan(tuple(turns[:2])), turns[2], turns[3], GroupPlan(tuple(turns[4:])))
    assert plan.num_batches == 3 + 3 + 1 + 3 and plan.clients == [0, 1, 2, 3, 4, 5]


def test_a_groups_batch_is_each_clients_own_batch_concatenated():
    """Each client keeps its own shuffle (seeded by round and client) and its own batch size
    (a client smaller than the batch takes all its rows)."""
    turns = [TurnPlan(0, 4), TurnPlan(1, 4), TurnPlan(2, 4)]
    sizes, offsets = [7, 2, 9], [0, 7, 9]
    sequential = list(RoundBatchSampler(turns, offsets, sizes, 3, seed=5, round_idx=2))
    grouped = RoundBatchSampler(turns, offsets, sizes, 3, seed=5, round_idx=2, groups=group_turns(turns, 3))
    assert len(grouped) == 4
    per_client = [sequential[0:4], sequential[4:8], sequential[8:12]]
    assert list(grouped) == [a + b + c for a, b, c in zip(*per_client)]


def test_expected_clients_of_a_round():
    assert expected_clients(4, "poisson", 0.25, 30) == 8 and expected_clients(4, "fixed_size", None, 30) == 4
