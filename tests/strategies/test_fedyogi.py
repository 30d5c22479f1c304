import torch

from lightning_fed.strategies import ClientUpdate, FedYogi
from tests.strategies.resume import resumed

X0 = {"w": torch.tensor([1.0, 2.0])}


def _round(*states):
    return [ClientUpdate(i, 10, {"w": torch.tensor(s)}) for i, s in enumerate(states)]


def _strategy():
    strategy = FedYogi(server_lr=1.0, beta_1=0.5, beta_2=0.5, tau=0.75)
    strategy.setup(X0, num_clients=2)
    return strategy


def test_update_v_moves_towards_delta_squared_by_sign():
    # Delta^2 = [1, 4, 9]; sign(v - Delta^2) = sign([3, 0, -5]) = [1, 0, -1]
    # v - 0.5 * Delta^2 * sign = [4 - 0.5, 4 - 0, 4 + 4.5] = [3.5, 4, 8.5]
    v = _strategy()._update_v(torch.tensor([4.0, 4.0, 4.0]), torch.tensor([1.0, -2.0, 3.0]))
    torch.testing.assert_close(v, torch.tensor([3.5, 4.0, 8.5]))


def test_two_rounds_hand_values():
    strategy = _strategy()  # eta = 1, beta_1 = 0.5, beta_2 = 0.5, tau = 0.75, v_{-1} = 0.5625

    # Round 1: avg = ([5, -2] + [3, 0]) / 2 = [4, -1];  Delta = [3, -3];  Delta^2 = 9 > v: sign = -1
    #   m = 0.5 * [3, -3] = [1.5, -1.5]
    #   v = 0.5625 + 0.5 * 9 = 5.0625;  sqrt(v) + tau = 2.25 + 0.75 = 3
    #   x = [1, 2] + [1.5, -1.5] / 3 = [1.5, 1.5]
    x1 = strategy.aggregate(X0, _round([5.0, -2.0], [3.0, 0.0]))
    torch.testing.assert_close(x1["w"], torch.tensor([1.5, 1.5]))
    torch.testing.assert_close(strategy.v["w"], torch.tensor([5.0625, 5.0625]))

    # Round 2: avg = [3.5, 3.5];  Delta = [2, 2];  Delta^2 = 4 < v = 5.0625: sign = +1
    #   m = 0.5 * [1.5, -1.5] + 0.5 * [2, 2] = [1.75, 0.25]
    #   v = 5.0625 - 0.5 * 4 = 3.0625 (FedAdam would give 4.53125);  sqrt(v) + tau = 1.75 + 0.75 = 2.5
    #   x = [1.5, 1.5] + [1.75, 0.25] / 2.5 = [1.5 + 0.7, 1.5 + 0.1] = [2.2, 1.6]
    x2 = strategy.aggregate(x1, _round([3.0, 3.0], [4.0, 4.0]))
    torch.testing.assert_close(x2["w"], torch.tensor([2.2, 1.6]))
    torch.testing.assert_close(strategy.m["w"], torch.tensor([1.75, 0.25]))
    torch.testing.assert_close(strategy.v["w"], torch.tensor([3.0625, 3.0625]))


def test_state_dict_round_trip():
    rounds = [_round([5.0, -2.0], [3.0, 0.0]), _round([3.0, 3.0], [4.0, 4.0]), _round([2.0, 2.5], [1.0, 0.5])]
    a, b, x = resumed(_strategy, rounds, X0)
    torch.testing.assert_close(a.aggregate(x, rounds[2])["w"], b.aggregate(x, rounds[2])["w"], rtol=0, atol=0)
    torch.testing.assert_close(a.m["w"], b.m["w"], rtol=0, atol=0)
