"""FedNova: normalized averaging by each client's local step count (hand values, learning)."""

import pytest
import torch

from lightning_fed.strategies import AggregationError, ClientUpdate, FedAvg
from lightning_fed.strategies.fednova import LOCAL_STEPS, FedNova, StepCount, path_length


def update(cid, n, w, tau):
    return ClientUpdate(cid, n, {"w": torch.tensor(w)}, {LOCAL_STEPS: torch.tensor([float(tau)])})


def test_hand_values_with_different_local_steps():
    x = {"w": torch.tensor([1.0, -1.0])}
    ups = [update(0, 1, [3.0, -1.0], 2), update(1, 3, [1.0, 5.0], 6)]
    # p = (1/4, 3/4); d_0 = (2, 0) / 2 = (1, 0); d_1 = (0, 6) / 6 = (0, 1)
    # tau_eff = 1/4 * 2 + 3/4 * 6 = 5; sum p_i d_i = (1/4, 3/4)
    # x + 5 * (1/4, 3/4) = (1 + 1.25, -1 + 3.75) = (2.25, 2.75)
    out = FedNova().aggregate(x, ups)
    torch.testing.assert_close(out["w"], torch.tensor([2.25, 2.75]))
    # FedAvg on the same updates: 1/4 * (3, -1) + 3/4 * (1, 5) = (1.5, 3.5)
    torch.testing.assert_close(FedAvg().aggregate(x, ups)["w"], torch.tensor([1.5, 3.5]))


def test_uniform_weighting_server_lr_and_a_client_without_steps():
    x = {"w": torch.tensor([0.0])}
    ups = [update(0, 10, [4.0], 4), update(1, 1, [1.0], 1), update(2, 5, [0.0], 0)]
    # p = 1/3 each; d = (1, 1, 0); tau_eff = (4 + 1 + 0) / 3 = 5/3; sum p d = 2/3
    # x + 0.5 * 5/3 * 2/3 = 5/9
    out = FedNova(weighting="uniform", server_lr=0.5).aggregate(x, ups)
    torch.testing.assert_close(out["w"], torch.tensor([5.0 / 9.0]))


def test_momentum_path_length_hand_values():
    # rho = 0.5, tau = 3: a = (1 - 0.5^3, 1 - 0.5^2, 1 - 0.5) / 0.5 = (1.75, 1.5, 1.0), ||a||_1 = 4.25
    assert path_length(3, 0.5) == pytest.approx(4.25)
    assert path_length(3) == 3.0
    x = {"w": torch.tensor([0.0])}
    ups = [update(0, 1, [4.25], 3), update(1, 1, [1.0], 1)]  # ||a_1||_1 = 1 for one step
    # d = (1, 1); tau_eff = (4.25 + 1) / 2 = 2.625; x + 2.625 * 1 = 2.625
    out = FedNova(local_momentum=0.5).aggregate(x, ups)
    torch.testing.assert_close(out["w"], torch.tensor([2.625]))


def test_equal_local_steps_is_fedavg_and_dtype_is_kept():
    x = {"w": torch.tensor([1.0, 2.0], dtype=torch.bfloat16)}
    ups = [update(0, 1, [3.0, 4.0], 5), update(1, 3, [7.0, 0.0], 5)]
    for u in ups:
        u.state["w"] = u.state["w"].to(torch.bfloat16)
    out = FedNova().aggregate(x, ups)
    assert out["w"].dtype == torch.bfloat16
    torch.testing.assert_close(out["w"], FedAvg().aggregate(x, ups)["w"])


def test_step_count_travels_in_finish_extras():
    strategy = FedNova()
    correction = strategy.local_correction({"w": torch.zeros(1)}, strategy.downlink(0), {})
    assert isinstance(correction, StepCount)
    p = torch.nn.Parameter(torch.ones(1))
    p.grad = torch.tensor([2.0])
    correction.correct_gradients({"w": p})
    assert p.grad.tolist() == [2.0]  # the gradients are not changed
    extras = correction.finish({"w": p}, num_steps=7, lr=0.1)
    assert extras.keys() == {LOCAL_STEPS} and extras[LOCAL_STEPS].tolist() == [7.0]


@pytest.mark.parametrize(
    "extras, match",
    [
        ({}, r"client 3: FedNova needs extras\['fednova/local_steps'\].*got None"),
        ({LOCAL_STEPS: torch.tensor([1.5])}, "whole number >= 0, got 1.5"),
    ],
)
def test_bad_step_counts_are_named(extras, match):
    x = {"w": torch.zeros(1)}
    with pytest.raises(AggregationError, match=match):
        FedNova().aggregate(x, [ClientUpdate(3, 1, {"w": torch.ones(1)}, extras)])
    with pytest.raises(AggregationError, match="zero updates"):
        FedNova().aggregate(x, [])


def test_invalid_hyper_parameters():
    with pytest.raises(ValueError, match=r"federation.strategy.local_momentum must be in \[0, 1\), got 1.0"):
        FedNova(local_momentum=1.0)
    with pytest.raises(ValueError, match="federation.strategy.weighting must be one of"):
        FedNova(weighting="steps")


def test_learns_with_unequal_local_steps(tmp_path):
    """local_epochs over clients of different sizes: tau_i differ, and the preference is learned."""
    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.datamodules.partition import Dirichlet
    from tests.helpers.runs import fit, preference_data, tiny_dpo

    seen: list[dict[int, float]] = []

    class Spy(FedNova):
        def aggregate(self, global_state, updates):
            seen.append({u.client_id: self.local_steps(u) for u in updates})
            return super().aggregate(global_state, updates)

    data = preference_data(partition=Dirichlet(alpha=1.0, key="client", min_size=8))
    # sizes 8 / 17 / 19 / 28 (18 / 5 / 5 / 7 training batches of 4 after the val split)
    loop = FederatedLoop(rounds=1, clients_per_round=2, local_steps=None, local_epochs=1, strategy=Spy(), seed=0)
    fit(tiny_dpo(), data, loop, str(tmp_path), num_sanity_val_steps=-1)
    taus = {cid: tau for round_taus in seen for cid, tau in round_taus.items()}
    assert len(seen) == 1 and len(set(taus.values())) > 1, seen  # the clients' step counts differ
    initial = loop.server.report.initial_eval["val"]
    final = loop.server.report.history[-1]["val"]
    assert final["loss"] < initial["loss"] - 0.1, (initial, final)
    assert initial["pref_acc"] < 0.7 and final["pref_acc"] >= 0.9, (initial, final)
