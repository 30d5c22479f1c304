import pytest
import torch

from lightning_fed.strategies import ClientUpdate
from lightning_fed.strategies.base import AggregationError
from lightning_fed.strategies.fedbiscuit import FedBiscuit, balanced_assignment, eq6_update, eq8_update, majority_vote


def _keys(u: int) -> str:
    return "m.lora_A.default.weight" if u == 0 else f"m.lora_A.selector_{u}.weight"


@pytest.mark.parametrize("seed", range(200))
def test_balanced_assignment_invariant(seed):
    g = torch.Generator().manual_seed(seed)
    m = int(torch.randint(1, 23, (1,), generator=g))
    u = int(torch.randint(1, 6, (1,), generator=g))
    losses = torch.rand(m, u, generator=g)
    if seed % 3 == 0:  # most clients prefer the same selector: heavy imbalance before balancing
        losses[:, 0] -= 1.0
    assign = balanced_assignment(losses)
    assert len(assign) == m and all(0 <= a < u for a in assign)
    sizes = [assign.count(s) for s in range(u)]
    assert max(sizes) - min(sizes) <= 1


def test_balanced_assignment_keeps_greedy_when_balanced_and_moves_to_next_best():
    losses = torch.tensor([[0.1, 0.5, 0.9], [0.2, 0.3, 0.9], [0.9, 0.1, 0.5], [0.9, 0.5, 0.1]])
    assert balanced_assignment(losses[[0, 2, 3]]) == [0, 1, 2]
    # Clients 0 and 1 both want selector 0 (cap 2 for 4 clients over 3 selectors: sizes 2,1,1).
    assert balanced_assignment(losses) == [0, 0, 1, 2]
    losses6 = torch.tensor([[0.1, 0.2, 0.3]] * 3 + [[0.3, 0.1, 0.2]] * 3)
    # Greedy sizes 3,3,0. Selector 0 is capped at 2: client 2 (ties keep the earlier clients)
    # moves to its next best, selector 1, now 4 strong; capped at 2, it keeps its best-fitting
    # clients 3 and 4 and sends 5 and 2 on to selector 2.
    assert balanced_assignment(losses6) == [0, 0, 2, 1, 1, 2]


def test_eq6_by_hand():
    current = {"w": torch.tensor([1.0, 2.0])}
    states = [{"w": torch.tensor([3.0, 0.0])}, {"w": torch.tensor([5.0, 4.0])}]
    # (1 - 0.25 - 0.25) * [1, 2] + 0.25 * [3, 0] + 0.25 * [5, 4] = [0.5 + 0.75 + 1.25, 1 + 0 + 1]
    out = eq6_update(current, states, [0.25, 0.25])
    torch.testing.assert_close(out["w"], torch.tensor([2.5, 2.0]))
    with pytest.raises(AggregationError, match="sum of p_m"):
        eq6_update(current, states, [0.75, 0.5])


def test_eq8_by_hand():
    states = [{"w": torch.tensor([2.0])}, {"w": torch.tensor([6.0])}]
    # p = (0.1, 0.3) (n_m / n of 2 sampled clients out of M = 4): as printed, Eq. (8) gives
    # (4 / 2) * (0.1 * 2 + 0.3 * 6) = 4.0 with coefficients 0.2 + 0.6 = 0.8 (a rescaled LoRA);
    # normalised: (0.1 * 2 + 0.3 * 6) / 0.4 = 2.0 / 0.4 = 5.0
    torch.testing.assert_close(eq8_update(states, [0.1, 0.3])["w"], torch.tensor([5.0]))
    # equal p_m = 1 / M: the plain mean (2 + 6) / 2, identical to Eq. (8) as printed
    torch.testing.assert_close(eq8_update(states, [0.25, 0.25])["w"], torch.tensor([4.0]))
    with pytest.raises(AggregationError, match="positive sum of p_m"):
        eq8_update(states, [0.0, 0.0])


def _six_clients(**kwargs):
    """U = 3, M = 6, sizes [1, 3, 2, 2, 4, 4] (n = 16); selector u's state is all u."""
    s = FedBiscuit(num_selectors=3, warmup_rounds=2, regroup_every=3, **kwargs)
    state = {_keys(u): torch.full((1,), float(u)) for u in range(3)}
    s.setup(state, num_clients=6)
    s.client_sizes = [1, 3, 2, 2, 4, 4]
    return s, state


@pytest.mark.parametrize(
    ("weighting", "expected"),
    [
        ("uniform", 4.5),  # (2 + 7) / 2
        ("num_examples", 6.0),  # (1 * 2 + 4 * 7) / (1 + 4); Eq. (8) as printed: 3 * (2 + 28) / 16 = 5.625
    ],
)
def test_warmup_weighting_is_normalised(weighting, expected):
    s, state = _six_clients(weighting=weighting)
    s.start_round(0)  # warm-up of selector 0
    ups = [ClientUpdate(0, 1, {_keys(0): torch.tensor([2.0])}), ClientUpdate(4, 4, {_keys(0): torch.tensor([7.0])})]
    torch.testing.assert_close(s.aggregate(state, ups)[_keys(0)], torch.tensor([expected]))


@pytest.mark.parametrize(
    ("weighting", "eq6_scope", "sel0", "sel1"),
    [
        # cluster, uniform: sel 0 = {0, 1}: p_0 = 1/2 -> 0.5 * 0 + 0.5 * 4 = 2
        #                   sel 1 = {2, 3}, both sampled: p = 1/2 each -> (5 + 9) / 2 = 7
        ("uniform", "cluster", 2.0, 7.0),
        # all, uniform: p_m = 1/6 -> sel 0: (5/6) * 0 + 4/6 = 2/3;  sel 1: (4/6) * 1 + (5 + 9)/6 = 3
        ("uniform", "all", 2 / 3, 3.0),
        # cluster, sizes: sel 0: p_0 = 1 / (1 + 3) -> 0.75 * 0 + 0.25 * 4 = 1;  sel 1: 2/4 each -> 7
        ("num_examples", "cluster", 1.0, 7.0),
        # all, sizes: p_0 = 1/16 -> 4/16 = 0.25;  sel 1: p = 2/16 each -> 0.75 * 1 + (10 + 18)/16 = 2.5
        ("num_examples", "all", 0.25, 2.5),
    ],
)
def test_eq6_scope_and_weighting_by_hand(weighting, eq6_scope, sel0, sel1):
    """The paper's literal p_m (over all M) takes ~U times smaller steps than within the cluster."""
    s, state = _six_clients(weighting=weighting, eq6_scope=eq6_scope)
    s.start_round(6)
    s.set_assignment([0, 0, 1, 1, 2, 2])
    ups = [
        ClientUpdate(0, 1, {_keys(0): torch.tensor([4.0])}),
        ClientUpdate(2, 2, {_keys(1): torch.tensor([5.0])}),
        ClientUpdate(3, 2, {_keys(1): torch.tensor([9.0])}),
    ]
    out = s.aggregate(state, ups)
    torch.testing.assert_close(out[_keys(0)], torch.tensor([sel0]))
    torch.testing.assert_close(out[_keys(1)], torch.tensor([sel1]))
    torch.testing.assert_close(out[_keys(2)], state[_keys(2)])  # no client of selector 2 sampled


def test_bad_weighting_and_scope_are_one_error():
    with pytest.raises(
        ValueError,
        match=r"federation.strategy.weighting must be one of .*"
        r"federation.strategy.eq6_scope must be one of \('cluster', 'all'\)",
    ):
        FedBiscuit(weighting="size", eq6_scope="global")


def test_majority_vote_by_hand():
    votes = torch.tensor([[1, 0, 1, 0], [1, 1, 0, 0], [0, 1, 1, 0]])
    assert majority_vote(votes).tolist() == [1, 1, 1, 0]
    with pytest.raises(ValueError, match="odd"):
        majority_vote(votes[:2])


@pytest.mark.parametrize("u", [2, 4, 0])
def test_even_u_is_an_error(u):
    with pytest.raises(ValueError, match=f"num_selectors must be >= 1 and odd, got {u}"):
        FedBiscuit(num_selectors=u)


def _strategy():
    s = FedBiscuit(num_selectors=3, warmup_rounds=2, regroup_every=3)
    state = {_keys(u): torch.full((2,), float(u)) for u in range(3)}
    s.setup(state, num_clients=4)
    return s, state


def test_schedule_client_model_and_aggregate():
    s, state = _strategy()
    assert [s.is_grouping_round(r) for r in range(11)] == [False] * 6 + [True, False, False, True, False]
    s.start_round(3)  # warm-up of selector 1, Eq. (8) with p_m = 1/4 over the 2 sampled clients
    assert list(s.client_model(2, state)) == [_keys(1)]
    ups = [
        ClientUpdate(0, 10, {_keys(1): torch.tensor([3.0, 5.0])}),
        ClientUpdate(2, 10, {_keys(1): torch.tensor([1.0, 1.0])}),
    ]
    out = s.aggregate(state, ups)
    torch.testing.assert_close(out[_keys(1)], torch.tensor([2.0, 3.0]))
    torch.testing.assert_close(out[_keys(0)], state[_keys(0)])
    s.start_round(6)
    s.set_assignment([2, 0, 2, 1])
    assert list(s.client_model(0, state)) == [_keys(2)] and list(s.client_model(1, state)) == [_keys(0)]
    # Selector 2 has clients 0 and 2 (p_m = 1/2 each); only client 0 took part -> Eq. (6).
    ups = [
        ClientUpdate(0, 10, {_keys(2): torch.tensor([4.0, 6.0])}),
        ClientUpdate(3, 10, {_keys(1): torch.tensor([3.0, 3.0])}),
    ]
    out = s.aggregate(state, ups)
    torch.testing.assert_close(out[_keys(2)], torch.tensor([3.0, 4.0]))  # 0.5 * 2 + 0.5 * [4, 6]
    torch.testing.assert_close(out[_keys(1)], torch.tensor([3.0, 3.0]))  # the only client of selector 1
    torch.testing.assert_close(out[_keys(0)], state[_keys(0)])  # not sampled: unchanged


def test_state_dict_round_trip():
    s, state = _strategy()
    s.start_round(7)
    s.set_assignment([1, 0, 2, 1])
    t, _ = _strategy()
    t.load_state_dict(s.state_dict())
    assert t.state_dict() == s.state_dict()
    assert [t.selector_of(c) for c in range(4)] == [1, 0, 2, 1]
