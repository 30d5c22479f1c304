import torch

from lightning_fed.strategies import ClientUpdate, FedAdagrad
from tests.strategies.resume import resumed

X0 = {"w": torch.tensor([1.0, 2.0])}


def _round(*states):
    return [ClientUpdate(i, 3, {"w": torch.tensor(s)}) for i, s in enumerate(states)]


def _strategy():
    # beta_2 is ignored by Adagrad; pass an odd value to show it has no effect.
    strategy = FedAdagrad(server_lr=1.0, beta_1=0.5, beta_2=0.1, tau=0.75)
    strategy.setup(X0, num_clients=2)
    return strategy


def test_update_v_is_a_running_sum_of_squares():
    v = torch.tensor([1.0, 2.0])
    torch.testing.assert_close(_strategy()._update_v(v, torch.tensor([3.0, -1.0])), torch.tensor([10.0, 3.0]))


def test_two_rounds_hand_values():
    strategy = _strategy()  # eta = 1, beta_1 = 0.5, tau = 0.75, v_{-1} = tau^2 = 0.5625

    # Round 1: avg = ([1, 3] + [3, 1]) / 2 = [2, 2];  Delta = [2, 2] - [1, 2] = [1, 0]
    #   m = 0.5 * 0 + 0.5 * [1, 0] = [0.5, 0]
    #   v = 0.5625 + [1, 0] = [1.5625, 0.5625];  sqrt(v) + tau = [1.25, 0.75] + 0.75 = [2, 1.5]
    #   x = [1, 2] + [0.5 / 2, 0 / 1.5] = [1.25, 2]
    x1 = strategy.aggregate(X0, _round([1.0, 3.0], [3.0, 1.0]))
    torch.testing.assert_close(x1["w"], torch.tensor([1.25, 2.0]))

    # Round 2: avg = [4.25, 1];  Delta = [4.25, 1] - [1.25, 2] = [3, -1]
    #   m = 0.5 * [0.5, 0] + 0.5 * [3, -1] = [1.75, -0.5]
    #   v = [1.5625, 0.5625] + [9, 1] = [10.5625, 1.5625];  sqrt(v) + tau = [3.25, 1.25] + 0.75 = [4, 2]
    #   x = [1.25, 2] + [1.75 / 4, -0.5 / 2] = [1.25 + 0.4375, 2 - 0.25] = [1.6875, 1.75]
    x2 = strategy.aggregate(x1, _round([4.25, 0.0], [4.25, 2.0]))
    torch.testing.assert_close(x2["w"], torch.tensor([1.6875, 1.75]))
    torch.testing.assert_close(strategy.m["w"], torch.tensor([1.75, -0.5]))
    torch.testing.assert_close(strategy.v["w"], torch.tensor([10.5625, 1.5625]))


def test_state_dict_round_trip():
    rounds = [_round([1.0, 3.0], [3.0, 1.0]), _round([4.25, 0.0], [4.25, 2.0]), _round([0.0, 0.5], [2.0, 1.0])]
    a, b, x = resumed(_strategy, rounds, X0)
    assert b.step == 2
    torch.testing.assert_close(a.aggregate(x, rounds[2])["w"], b.aggregate(x, rounds[2])["w"], rtol=0, atol=0)
