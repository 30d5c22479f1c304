import pytest
import torch

from lightning_fed.strategies import AggregationError, ClientUpdate, HetLoRA
from lightning_fed.strategies.hetlora import rank_regularizer, self_prune

A, B = "m.lora_A.default.weight", "m.lora_B.default.weight"
GLOBAL = {A: torch.zeros(2, 2), B: torch.zeros(2, 2), "head": torch.zeros(1)}


def _strategy(**kwargs):
    s = HetLoRA(**kwargs)
    s.setup(GLOBAL, 2)
    return s


def test_zero_padding_average_by_hand():
    s = _strategy(client_ranks=[1, 2], weighting="uniform")
    ups = [
        ClientUpdate(
            0, 1, {A: torch.tensor([[1.0, 2.0]]), B: torch.tensor([[1.0], [0.0]]), "head": torch.tensor([2.0])}
        ),
        ClientUpdate(
            1, 1, {A: torch.tensor([[3.0, 4.0], [5.0, 6.0]]), B: torch.ones(2, 2), "head": torch.tensor([4.0])}
        ),
    ]
    out = s.aggregate(GLOBAL, ups)
    # client 0 padded: A [[1, 2], [0, 0]], B [[1, 0], [0, 0]]; the second component is halved by the zeros
    torch.testing.assert_close(out[A], torch.tensor([[2.0, 3.0], [2.5, 3.0]]))
    torch.testing.assert_close(out[B], torch.tensor([[1.0, 0.5], [0.5, 0.5]]))
    torch.testing.assert_close(out["head"], torch.tensor([3.0]))
    # distribution by truncation to each client's rank
    assert s.client_model(0, out)[A].tolist() == [[2.0, 3.0]] and s.client_model(1, out) is out


def test_sparsity_weighted_aggregation_by_hand():
    s = _strategy(client_ranks=[1, 2], weighting="sparsity")
    ups = [  # B0 A0 = [[3, 4], [0, 0]], norm 5; B1 A1 = [[6, 8], [0, 0]], norm 10 -> weights 1/3, 2/3
        ClientUpdate(
            0, 9, {A: torch.tensor([[3.0, 4.0]]), B: torch.tensor([[1.0], [0.0]]), "head": torch.tensor([0.0])}
        ),
        ClientUpdate(1, 1, {A: torch.tensor([[6.0, 8.0], [0.0, 0.0]]), B: torch.eye(2), "head": torch.tensor([3.0])}),
    ]
    out = s.aggregate(GLOBAL, ups)
    torch.testing.assert_close(out[A], torch.tensor([[5.0, 20.0 / 3], [0.0, 0.0]]))
    torch.testing.assert_close(out[B], torch.tensor([[1.0, 0.0], [0.0, 2.0 / 3]]))
    torch.testing.assert_close(out["head"], torch.tensor([1.5]))  # other keys: uniform


def test_equal_ranks_is_fedavg_on_the_factors():
    s = _strategy()
    ups = [
        ClientUpdate(i, n, {A: torch.full((2, 2), v), B: torch.full((2, 2), -v), "head": torch.tensor([v])})
        for i, n, v in [(0, 1, 1.0), (1, 3, 5.0)]
    ]
    out = s.aggregate(GLOBAL, ups)
    torch.testing.assert_close(out[A], torch.full((2, 2), 4.0))  # (1 * 1 + 3 * 5) / 4
    torch.testing.assert_close(out[B], torch.full((2, 2), -4.0))


def test_bad_ranks_and_updates_are_refused():
    with pytest.raises(ValueError, match=r"client ranks must be in \[1, 2\].*\(1, 3\)"):
        _strategy(client_ranks=[1, 3])
    with pytest.raises(ValueError, match="federation.strategy.weighting must be one of"):
        HetLoRA(weighting="norm")
    s = _strategy()
    too_big = {A: torch.zeros(3, 2), B: torch.zeros(2, 3), "head": torch.zeros(1)}
    with pytest.raises(AggregationError, match="client 0: rank 3 exceeds the global rank 2"):
        s.aggregate(GLOBAL, [ClientUpdate(0, 1, too_big)])


def test_self_pruning_by_hand():
    state = {A: torch.tensor([[1.0, 0.0], [0.0, 3.0]]), B: torch.tensor([[2.0, 0.0], [0.0, 4.0]])}
    # gamma = 0.5: keep g = 1; penalty = ||A[1:]|| ||B[:, 1:]|| = 3 * 4
    assert float(rank_regularizer(state, 0.5)) == 12.0
    kept, rank, penalty = self_prune(state, 0.5, previous=None)  # first round: never prunes
    assert rank == 2 and penalty == 12.0 and kept[A].shape == (2, 2)
    kept, rank, _ = self_prune(state, 0.5, previous=13.0)  # the penalty fell: prune to rank 1
    assert rank == 1 and kept[A].tolist() == [[1.0, 0.0]] and kept[B].tolist() == [[2.0], [0.0]]
    assert self_prune(state, 0.5, previous=12.0)[1] == 2  # not lower: keep


def test_regularizer_is_differentiable():
    a = torch.tensor([[1.0, 0.0], [0.0, 3.0]], requires_grad=True)
    rank_regularizer({A: a, B: torch.tensor([[2.0, 0.0], [0.0, 4.0]])}, 0.5).backward()
    assert a.grad.tolist() == [[0.0, 0.0], [0.0, 4.0]]  # d(||A_tail|| * 4) / dA_tail = 4 A_tail / ||A_tail||


def test_ranks_set_before_setup_are_checked_at_setup_and_resume():
    s = HetLoRA()
    s.set_client_ranks([1, 5])
    with pytest.raises(ValueError, match=r"\(1, 5\)"):
        s.setup(GLOBAL, 2)
    s = _strategy(client_ranks=[1, 2])
    t = HetLoRA()
    t.load_state_dict(s.state_dict())
    t.setup(GLOBAL, 2)
    assert t.rank_of(0) == 1 and t.client_model(0, GLOBAL)[A].shape == (1, 2)
