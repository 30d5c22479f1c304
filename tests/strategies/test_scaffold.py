import copy
import io

import pytest
import torch

from lightning_fed.strategies import AggregationError, ClientUpdate, ControlVariateCorrection, Scaffold

X0 = {"w": torch.tensor([1.0, 2.0])}


def _client(strategy, client_id, x, memory, y, num_steps, lr, grad, num_examples=1):
    """One client's round: correct one gradient, 'train' to ``y``, finish. Returns (update, grad)."""
    correction = strategy.local_correction(x, strategy.downlink(client_id), memory)
    assert isinstance(correction, ControlVariateCorrection)
    p = torch.nn.Parameter(x["w"].clone())
    p.grad = torch.tensor(grad)
    correction.correct_gradients({"w": p})
    with torch.no_grad():
        p.copy_(torch.tensor(y))
    extras = correction.finish({"w": p}, num_steps=num_steps, lr=lr)
    return ClientUpdate(client_id, num_examples, {"w": p.detach().clone()}, extras), p.grad


def test_two_rounds_hand_values():
    strategy = Scaffold(server_lr=0.5)
    strategy.setup(X0, num_clients=4)  # N = 4, two clients per round: |S| / N = 0.5
    memories = {0: {}, 1: {}, 2: {}}
    assert set(strategy.downlink(0)) == {"control/w"}
    torch.testing.assert_close(strategy.downlink(0)["control/w"], torch.zeros(2))

    # Round 1, c = 0, every c_i = 0 -> the gradient correction c - c_i is 0.
    # client 0: y = [0, 2], K = 2, lr = 0.5: c_0+ = 0 - 0 + ([1, 2] - [0, 2]) / (2 * 0.5) = [1, 0]
    u0, g0 = _client(strategy, 0, X0, memories[0], [0.0, 2.0], 2, 0.5, [1.0, 1.0], num_examples=1)
    torch.testing.assert_close(g0, torch.tensor([1.0, 1.0]))
    torch.testing.assert_close(u0.extras["control/w"], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(memories[0]["control/w"], torch.tensor([1.0, 0.0]))
    # client 1: y = [1, 4], K = 1, lr = 0.5: c_1+ = ([1, 2] - [1, 4]) / 0.5 = [0, -4]
    u1, _ = _client(strategy, 1, X0, memories[1], [1.0, 4.0], 1, 0.5, [0.0, 0.0], num_examples=9)
    torch.testing.assert_close(u1.extras["control/w"], torch.tensor([0.0, -4.0]))
    # Server: uniform mean (num_examples 1 vs 9 is ignored) of y - x = ([-1, 0] + [0, 2]) / 2 = [-0.5, 1]
    #   x = [1, 2] + 0.5 * [-0.5, 1] = [0.75, 2.5]
    #   c = 0 + 0.5 * ([1, 0] + [0, -4]) / 2 = [0.25, -1]
    x1 = strategy.aggregate(X0, [u0, u1])
    torch.testing.assert_close(x1["w"], torch.tensor([0.75, 2.5]))
    torch.testing.assert_close(strategy.downlink(0)["control/w"], torch.tensor([0.25, -1.0]))

    # Round 2, c = [0.25, -1]; clients 0 (c_0 = [1, 0]) and 2 (new, c_2 = 0).
    # client 0: grad [1, 1] + (c - c_0) = [1, 1] + [-0.75, -1] = [0.25, 0]
    #   y = [0.25, 2.5], K = 2, lr = 0.25: (x - y) / 0.5 = [0.5, 0] / 0.5 = [1, 0]
    #   c_0+ = [1, 0] - [0.25, -1] + [1, 0] = [1.75, 1];  delta = c_0+ - c_0 = [0.75, 1]
    u0, g0 = _client(strategy, 0, x1, memories[0], [0.25, 2.5], 2, 0.25, [1.0, 1.0])
    torch.testing.assert_close(g0, torch.tensor([0.25, 0.0]))
    torch.testing.assert_close(u0.extras["control/w"], torch.tensor([0.75, 1.0]))
    torch.testing.assert_close(memories[0]["control/w"], torch.tensor([1.75, 1.0]))
    # client 2: grad [0, 0] + (c - 0) = [0.25, -1]
    #   y = [0.75, 3.5], K = 1, lr = 1: (x - y) / 1 = [0, -1]
    #   c_2+ = 0 - [0.25, -1] + [0, -1] = [-0.25, 0];  delta = [-0.25, 0]
    u2, g2 = _client(strategy, 2, x1, memories[2], [0.75, 3.5], 1, 1.0, [0.0, 0.0])
    torch.testing.assert_close(g2, torch.tensor([0.25, -1.0]))
    torch.testing.assert_close(memories[2]["control/w"], torch.tensor([-0.25, 0.0]))
    # Server: mean(y - x) = ([-0.5, 0] + [0, 1]) / 2 = [-0.25, 0.5]
    #   x = [0.75, 2.5] + 0.5 * [-0.25, 0.5] = [0.625, 2.75]
    #   c = [0.25, -1] + 0.5 * ([0.75, 1] + [-0.25, 0]) / 2 = [0.25, -1] + [0.125, 0.25] = [0.375, -0.75]
    x2 = strategy.aggregate(x1, [u0, u2])
    torch.testing.assert_close(x2["w"], torch.tensor([0.625, 2.75]))
    torch.testing.assert_close(strategy.state_dict()["control"]["w"], torch.tensor([0.375, -0.75]))
    # Client 1 did not take part in round 2: its memory is untouched.
    torch.testing.assert_close(memories[1]["control/w"], torch.tensor([0.0, -4.0]))


def test_parameters_without_grad_are_skipped_and_inputs_kept():
    strategy = Scaffold()
    strategy.setup(X0, num_clients=1)
    x = {"w": X0["w"].clone()}
    correction = strategy.local_correction(x, {"control/w": torch.tensor([1.0, 1.0])}, {})
    p = torch.nn.Parameter(torch.zeros(2))
    correction.correct_gradients({"w": p})
    assert p.grad is None
    torch.testing.assert_close(x["w"], X0["w"])


@pytest.mark.parametrize(("num_steps", "lr", "name"), [(0, 0.1, "num_steps"), (3, 0.0, "lr")])
def test_finish_rejects_zero_steps_or_lr(num_steps, lr, name):
    strategy = Scaffold()
    strategy.setup(X0, num_clients=1)
    correction = strategy.local_correction(X0, strategy.downlink(0), {})
    with pytest.raises(ValueError, match=rf"`{name}` > 0.*got 0"):
        correction.finish({"w": torch.zeros(2)}, num_steps=num_steps, lr=lr)


def test_aggregate_errors():
    strategy = Scaffold()
    with pytest.raises(RuntimeError, match="setup"):
        strategy.aggregate(X0, [ClientUpdate(0, 1, {"w": torch.zeros(2)}, {"control/w": torch.zeros(2)})])
    strategy.setup(X0, num_clients=2)
    with pytest.raises(AggregationError, match="zero updates"):
        strategy.aggregate(X0, [])
    with pytest.raises(AggregationError, match=r"client 5: extras lack control deltas \['control/w'\]"):
        strategy.aggregate(X0, [ClientUpdate(5, 1, {"w": torch.zeros(2)})])


def test_invalid_hyper_parameters():
    with pytest.raises(ValueError, match="federation.strategy.server_lr must be > 0, got -1.0"):
        Scaffold(server_lr=-1.0)
    with pytest.raises(ValueError, match="`num_clients` must be >= 1, got 0"):
        Scaffold().setup(X0, num_clients=0)


def test_state_dict_round_trip():
    plan = [  # per round: (client id, y, K, lr)
        [(0, [0.0, 2.0], 2, 0.5), (1, [1.0, 4.0], 1, 0.5)],
        [(0, [0.25, 2.5], 2, 0.25), (2, [0.75, 3.5], 1, 1.0)],
        [(1, [0.5, 3.0], 3, 0.1), (2, [0.0, 2.0], 2, 0.2), (0, [1.0, 1.0], 1, 0.3)],
    ]

    def run_round(strategy, x, memories, round_plan):
        ups = [_client(strategy, cid, x, memories[cid], y, k, lr, [0.0, 0.0])[0] for cid, y, k, lr in round_plan]
        return strategy.aggregate(x, ups)

    a = Scaffold(server_lr=0.5)
    a.setup(X0, num_clients=3)
    memories = {0: {}, 1: {}, 2: {}}
    x = X0
    for round_plan in plan[:2]:
        x = run_round(a, x, memories, round_plan)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = Scaffold(server_lr=0.5)
    b.setup(X0, num_clients=3)
    b.load_state_dict(torch.load(buffer, weights_only=True))
    memories_b = copy.deepcopy(memories)
    out_a, out_b = run_round(a, x, memories, plan[2]), run_round(b, x, memories_b, plan[2])
    torch.testing.assert_close(out_a["w"], out_b["w"], rtol=0, atol=0)
    torch.testing.assert_close(a.control["w"], b.control["w"], rtol=0, atol=0)


def test_parameter_correction_hand_values_and_sgd_equivalence():
    """``correction="parameter"`` (OpenFedLLM): ``w -= lr (c - c_i)`` after each SGD step;
    option II divides by the sum of the lrs used. With SGD the weights end where the
    gradient correction puts them."""
    control = {"w": torch.tensor([0.5, -1.0])}  # c
    grads = [torch.tensor([1.0, 1.0]), torch.tensor([2.0, 0.0])]
    lrs = [0.1, 0.2]  # a schedule: the lr changes between the two steps
    ends = {}
    for mode in ("parameter", "gradient"):
        strategy = Scaffold(correction=mode)
        strategy.setup(X0, num_clients=2)
        strategy.load_state_dict({"control": control})
        memory = {"control/w": torch.tensor([1.0, 0.0])}  # c_i; c - c_i = [-0.5, -1]
        corr = strategy.local_correction(X0, strategy.downlink(0), memory)
        p = torch.nn.Parameter(X0["w"].clone())
        opt = torch.optim.SGD([p], lr=lrs[0])
        for g, lr in zip(grads, lrs):
            opt.param_groups[0]["lr"] = lr
            p.grad = g.clone()
            corr.correct_gradients({"w": p})
            opt.step()
            corr.after_optimizer_step({"w": p}, lr)
        ends[mode] = p.detach().clone()
        extras = corr.finish({"w": p}, num_steps=2, lr=lrs[-1])
        if mode == "parameter":
            # step 1: [1, 2] - 0.1 * [1, 1] = [0.9, 1.9]; then - 0.1 * [-0.5, -1] -> [0.95, 2.0]
            # step 2: [0.95, 2.0] - 0.2 * [2, 0] = [0.55, 2.0]; then - 0.2 * [-0.5, -1] -> [0.65, 2.2]
            torch.testing.assert_close(p.detach(), torch.tensor([0.65, 2.2]))
            # x - y = [0.35, -0.2]; divided by 0.1 + 0.2 = 0.3: [7/6, -2/3]
            # c_i+ = [1, 0] - [0.5, -1] + [7/6, -2/3] = [5/3, 1/3]
            #      = the lr-weighted mean gradient (0.1 [1, 1] + 0.2 [2, 0]) / 0.3 = [5/3, 1/3]
            torch.testing.assert_close(memory["control/w"], torch.tensor([5 / 3, 1 / 3]))
            torch.testing.assert_close(extras["control/w"], torch.tensor([2 / 3, 1 / 3]))
        else:
            # gradient mode divides by K * lr = 2 * 0.2 = 0.4: [0.35, -0.2] / 0.4 = [0.875, -0.5]
            # c_i+ = [1, 0] - [0.5, -1] + [0.875, -0.5] = [1.375, 0.5]
            torch.testing.assert_close(memory["control/w"], torch.tensor([1.375, 0.5]))
    # SGD: y - lr (g + c - c_i) == (y - lr g) - lr (c - c_i): same weights either way
    torch.testing.assert_close(ends["parameter"], ends["gradient"])


def test_parameter_correction_is_not_normalised_by_adam():
    """With Adam the gradient correction is rescaled away; the parameter correction moves the
    weights by exactly ``lr * (c - c_i)`` on top of Adam's step."""
    x = {"w": torch.tensor([0.0])}
    moved = {}
    for mode in ("parameter", "gradient"):
        strategy = Scaffold(correction=mode)
        strategy.setup(x, num_clients=1)
        strategy.load_state_dict({"control": {"w": torch.tensor([10.0])}})  # c - c_i = 10
        corr = strategy.local_correction(x, strategy.downlink(0), {})
        p = torch.nn.Parameter(x["w"].clone())
        opt = torch.optim.Adam([p], lr=0.01)
        p.grad = torch.tensor([1.0])
        corr.correct_gradients({"w": p})
        opt.step()
        corr.after_optimizer_step({"w": p}, 0.01)
        moved[mode] = p.item()
    # Adam's first step is lr * g / (|g| + eps) ~ lr * sign(g) = 0.01 whatever g:
    # gradient: g + 10 = 11 -> w = -0.01 (the correction only survives as a sign)
    # parameter: w = -0.01 (Adam on g = 1) - 0.01 * 10 = -0.11
    assert moved["gradient"] == pytest.approx(-0.01, abs=1e-6)
    assert moved["parameter"] == pytest.approx(-0.11, abs=1e-6)


def test_server_weighting_option():
    """``weighting="num_examples"`` (OpenFedLLM) weights the models by |D_k|; controls stay uniform."""
    strategy = Scaffold(weighting="num_examples")
    strategy.setup(X0, num_clients=2)
    ups = [
        ClientUpdate(0, 1, {"w": torch.tensor([0.0, 0.0])}, {"control/w": torch.tensor([4.0, 0.0])}),
        ClientUpdate(1, 3, {"w": torch.tensor([4.0, 4.0])}, {"control/w": torch.tensor([0.0, 8.0])}),
    ]
    # x = (1 * [0, 0] + 3 * [4, 4]) / 4 = [3, 3];  c = 0 + 2/2 * ([4, 0] + [0, 8]) / 2 = [2, 4]
    torch.testing.assert_close(strategy.aggregate(X0, ups)["w"], torch.tensor([3.0, 3.0]))
    torch.testing.assert_close(strategy.control["w"], torch.tensor([2.0, 4.0]))
    with pytest.raises(
        ValueError,
        match=r"federation.strategy.correction must be one of \('gradient', 'parameter'\).*"
        r"federation.strategy.weighting must be one of",
    ):
        Scaffold(correction="weights", weighting="size")


def test_federated_loop_applies_the_parameter_correction_after_each_step(tmp_path):
    """The loop calls ``after_optimizer_step`` once per optimizer step with the step's lr."""
    from lightning_fed.callbacks import FederatedLoop
    from tests.helpers.runs import fit, preference_data, tiny_dpo

    seen = []

    class Spy(Scaffold):
        def local_correction(self, global_state, downlink, client_memory):
            corr = super().local_correction(global_state, downlink, client_memory)
            seen.append(corr)
            return corr

    loop = FederatedLoop(rounds=1, clients_per_round=2, local_steps=3, strategy=Spy(correction="parameter"), seed=0)
    module = tiny_dpo()
    fit(module, preference_data(), loop, str(tmp_path))
    lr = module.trainer.optimizers[0].param_groups[0]["lr"]
    assert len(seen) == 2
    for corr in seen:  # K = 3 steps at a constant lr: sum of lrs = 3 * lr
        assert corr.lr_sum == pytest.approx(3 * lr)
