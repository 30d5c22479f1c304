import io

import pytest
import torch

from lightning_fed.strategies import ClientUpdate, FedProx, ProximalCorrection, proximal_term


def test_proximal_term_hand_value():
    params = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([3.0])}
    anchor = {"a": torch.tensor([0.0, 4.0])}  # "b" has no anchor: it does not contribute
    # mu/2 * ((1 - 0)^2 + (2 - 4)^2) = 0.25 * (1 + 4) = 1.25
    torch.testing.assert_close(proximal_term(params, anchor, mu=0.5), torch.tensor(1.25))
    assert proximal_term({}, anchor, mu=0.5).item() == 0.0


def test_gradient_correction_hand_values():
    a = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    a.grad = torch.tensor([10.0, 10.0])
    frozen = torch.nn.Parameter(torch.tensor([5.0]))  # no gradient: left alone
    correction = FedProx(mu=0.5).local_correction(
        {"a": torch.tensor([0.0, 4.0]), "frozen": torch.tensor([0.0])}, {}, {}
    )
    assert isinstance(correction, ProximalCorrection)
    correction.correct_gradients({"a": a, "frozen": frozen})
    # grad + mu * (w - w_g) = [10, 10] + 0.5 * [1, -2] = [10.5, 9]
    torch.testing.assert_close(a.grad, torch.tensor([10.5, 9.0]))
    assert frozen.grad is None
    assert correction.finish({"a": a}, num_steps=1, lr=0.1) == {}


def test_gradient_correction_matches_autograd_of_proximal_term():
    anchor = {"a": torch.tensor([0.5, -1.0, 2.0])}
    a = torch.nn.Parameter(torch.tensor([1.0, 1.0, 1.0]))
    proximal_term({"a": a}, anchor, mu=0.3).backward()
    expected = a.grad.clone()
    a.grad = torch.zeros(3)
    ProximalCorrection(anchor, mu=0.3).correct_gradients({"a": a})
    torch.testing.assert_close(a.grad, expected)


def test_anchor_is_not_moved_by_in_place_training():
    a = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    correction = ProximalCorrection({"a": a.detach()}, mu=1.0)  # global state aliasing the model
    a.grad = torch.zeros(2)
    correction.correct_gradients({"a": a})  # caches w_g = [1, 2]
    with torch.no_grad():
        a.add_(1.0)  # an optimizer step
    a.grad = torch.zeros(2)
    correction.correct_gradients({"a": a})
    # 1.0 * ([2, 3] - [1, 2]) = [1, 1]
    torch.testing.assert_close(a.grad, torch.tensor([1.0, 1.0]))


def test_aggregation_is_fedavg():
    x = {"w": torch.tensor([1.0, 2.0])}
    ups = [ClientUpdate(0, 1, {"w": torch.tensor([3.0, 4.0])}), ClientUpdate(1, 3, {"w": torch.tensor([7.0, 0.0])})]
    # (1 * [3, 4] + 3 * [7, 0]) / 4 = [6, 1]
    torch.testing.assert_close(FedProx(mu=1.0).aggregate(x, ups)["w"], torch.tensor([6.0, 1.0]))


@pytest.mark.parametrize("mu", [0.0, -0.1])
def test_invalid_mu(mu):
    with pytest.raises(ValueError, match=f"federation.strategy.mu must be > 0, got {mu}"):
        FedProx(mu=mu)


def test_state_dict_round_trip():
    x0 = {"w": torch.tensor([1.0, 2.0])}
    rounds = [[ClientUpdate(i, i + 1, {"w": torch.tensor([float(r + i), 1.0])}) for i in range(2)] for r in range(3)]
    a = FedProx(mu=0.1, server_lr=0.5)
    a.setup(x0, num_clients=2)
    x = x0
    for ups in rounds[:2]:
        x = a.aggregate(x, ups)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = FedProx(mu=0.1, server_lr=0.5)
    b.setup(x0, num_clients=2)
    b.load_state_dict(torch.load(buffer, weights_only=True))
    torch.testing.assert_close(a.aggregate(x, rounds[2])["w"], b.aggregate(x, rounds[2])["w"], rtol=0, atol=0)
