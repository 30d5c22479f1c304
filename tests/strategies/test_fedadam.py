import torch

from lightning_fed.strategies import ClientUpdate, FedAdam
from tests.strategies.resume import resumed

X0 = {"w": torch.tensor([1.0, 2.0])}


def _round(*states):
    # Unequal |D_k| with uniform weighting: the plain mean is used.
    return [ClientUpdate(i, 1 + 5 * i, {"w": torch.tensor(s)}) for i, s in enumerate(states)]


def _strategy():
    strategy = FedAdam(server_lr=1.0, beta_1=0.25, beta_2=0.5, tau=0.25, weighting="uniform")
    strategy.setup(X0, num_clients=4)
    return strategy


def test_update_v_is_an_exponential_average():
    # 0.5 * [1, 4] + 0.5 * [9, 0] = [5, 2]
    v = _strategy()._update_v(torch.tensor([1.0, 4.0]), torch.tensor([3.0, 0.0]))
    torch.testing.assert_close(v, torch.tensor([5.0, 2.0]))


def test_two_rounds_hand_values():
    strategy = _strategy()  # eta = 1, beta_1 = 0.25, beta_2 = 0.5, tau = 0.25, v_{-1} = 0.0625

    # Round 1: avg = ([2.5, 1.5] + [3, 2]) / 2 = [2.75, 1.75];  Delta = [1.75, -0.25]
    #   m = 0.75 * Delta = [1.3125, -0.1875]
    #   v = 0.5 * 0.0625 + 0.5 * [3.0625, 0.0625] = [1.5625, 0.0625];  sqrt(v) + tau = [1.5, 0.5]
    #   x = [1, 2] + [1.3125 / 1.5, -0.1875 / 0.5] = [1, 2] + [0.875, -0.375] = [1.875, 1.625]
    #   (no bias correction: with it the step would be scaled by sqrt(1 - 0.5) / (1 - 0.25))
    x1 = strategy.aggregate(X0, _round([2.5, 1.5], [3.0, 2.0]))
    torch.testing.assert_close(x1["w"], torch.tensor([1.875, 1.625]))

    # Round 2: avg = [0.625, 3.375];  Delta = [0.625, 3.375] - [1.875, 1.625] = [-1.25, 1.75]
    #   m = 0.25 * [1.3125, -0.1875] + 0.75 * [-1.25, 1.75] = [0.328125 - 0.9375, -0.046875 + 1.3125]
    #     = [-0.609375, 1.265625]
    #   v = 0.5 * [1.5625, 0.0625] + 0.5 * [1.5625, 3.0625] = [1.5625, 1.5625];  sqrt(v) + tau = [1.5, 1.5]
    #   x = [1.875, 1.625] + [-0.40625, 0.84375] = [1.46875, 2.46875]
    x2 = strategy.aggregate(x1, _round([0.625, 3.0], [0.625, 3.75]))
    torch.testing.assert_close(x2["w"], torch.tensor([1.46875, 2.46875]))
    torch.testing.assert_close(strategy.m["w"], torch.tensor([-0.609375, 1.265625]))
    torch.testing.assert_close(strategy.v["w"], torch.tensor([1.5625, 1.5625]))


def test_state_dict_round_trip():
    rounds = [_round([2.5, 1.5], [3.0, 2.0]), _round([0.625, 3.0], [0.625, 3.75]), _round([0.0, 1.0], [1.0, 0.0])]
    a, b, x = resumed(_strategy, rounds, X0)
    torch.testing.assert_close(a.aggregate(x, rounds[2])["w"], b.aggregate(x, rounds[2])["w"], rtol=0, atol=0)
    torch.testing.assert_close(a.v["w"], b.v["w"], rtol=0, atol=0)
