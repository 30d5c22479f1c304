"""PDPO's margins, loss, adaptive scale and reward-weight schedule against hand-worked values."""

import math

import pytest
import torch

from lightning_fed.modules.pdpo_loss import (
    AdaptiveRewardScale,
    combined_margin,
    implicit_margin,
    pdpo_loss,
    reward_weight,
    scale_ratio,
)


def test_implicit_margin_eq4():
    # (log pi_w - log ref_w) - (log pi_l - log ref_l) = (-1 + 2) - (-3 + 2) = 2 and (0 + 1) - (-1 + 1) = 1
    delta = implicit_margin(
        torch.tensor([-1.0, 0.0]), torch.tensor([-3.0, -1.0]), torch.tensor([-2.0, -1.0]), torch.tensor([-2.0, -1.0])
    )
    assert delta.tolist() == [2.0, 1.0]


def test_combined_margin_and_loss_eq6_eq8():
    delta = combined_margin(torch.tensor([2.0]), torch.tensor([0.5]), reward_weight=1.0, scale=torch.tensor(2.0))
    assert delta.item() == 3.0  # 2 + 1.0 * 2 * 0.5
    # -log sigmoid(0.1 * 3) = log(1 + e^-0.3) = 0.554355...
    assert pdpo_loss(delta, beta=0.1).item() == pytest.approx(math.log(1 + math.exp(-0.3)), rel=1e-6)
    assert pdpo_loss(torch.tensor([0.0]), beta=0.1).item() == pytest.approx(math.log(2))


def test_scale_carries_no_gradient():
    er = torch.tensor([1.0], requires_grad=True)
    s = torch.tensor(3.0, requires_grad=True)
    combined_margin(torch.tensor([0.0]), er, 0.5, s).sum().backward()
    assert er.grad.item() == 1.5 and s.grad is None  # d/d er = w_r * s; s is a constant


def test_scale_ratio_eq7():
    # E|ir| = (2 + 4) / 2 = 3, E|er| = (1 + 0.5) / 2 = 0.75 -> s = 4
    assert scale_ratio(torch.tensor([2.0, -4.0]), torch.tensor([1.0, -0.5]), eps=0.0).item() == pytest.approx(4.0)


def test_adaptive_scale_ema():
    s = AdaptiveRewardScale(momentum=0.95, eps=0.0)
    assert not s.value.requires_grad and s.count.item() == 0
    assert s.update(torch.tensor([2.0, -4.0]), torch.tensor([1.0, -0.5])).item() == pytest.approx(
        4.0
    )  # first batch sets it
    assert s.update(torch.tensor([1.0]), torch.tensor([0.5])).item() == pytest.approx(0.95 * 4 + 0.05 * 2)  # 3.9
    assert s.count.item() == 2
    with pytest.raises(ValueError, match=r"model.scale_momentum must be in \[0, 1\), got 1.5"):
        AdaptiveRewardScale(momentum=1.5)


def test_reward_weight_schedule():
    assert [reward_weight(t, 5) for t in range(5)] == [0.5, 0.75, 1.0, 1.25, 1.5]
    assert reward_weight(0, 1) == 0.5 and reward_weight(9, 5) == 1.5  # one round; past the end is clamped
    assert reward_weight(1, 3, start=0.0, end=2.0) == 1.0
    with pytest.raises(ValueError, match="rounds must be >= 1, got 0"):
        reward_weight(0, 0)


def test_loss_triggered_lr_decay_app_d3():
    from lightning_fed.modules.pdpo_schedule import LossTriggeredDecay

    d = LossTriggeredDecay(factor=0.8, min_lr=1e-6)
    assert all(not p.requires_grad for p in d.parameters())  # personal state, never optimised
    losses = {0: [0.7, 0.5], 1: [0.5, 0.5], 2: [0.9, 0.5], 3: [0.4]}  # round means 0.6, 0.5, 0.7, 0.4
    scales = []
    for round_idx, round_losses in losses.items():
        for loss in round_losses:
            scales.append(d.start_step(round_idx))
            d.observe(loss)
    # round 1 closes round 0 (no earlier loss): no decay; round 2 closes round 1 (0.5 < 0.6): none;
    # round 3 closes round 2 (0.7 > 0.5): decay once
    assert scales == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, pytest.approx(0.8)]
    assert d.last_loss.item() == pytest.approx(0.7) and d.lr(1e-4) == pytest.approx(8e-5)
    d.scale.fill_(1e-3)
    assert d.lr(1e-4) == 1e-6 and d.lr(5e-7) == 5e-7  # floored at min_lr, never raised above the base
    with pytest.raises(ValueError, match=r"model.lr_decay must be in \(0, 1\) or null, got 1.0"):
        LossTriggeredDecay(factor=1.0)
