import math

import pytest
import torch

from lightning_fed.modules.losses import IGNORE_INDEX, dpo_loss, sequence_log_probs, sft_loss, token_log_probs


def test_sft_loss_scores_response_tokens_only():
    # Vocab of 2. Position 0 predicts labels[1] = 0 from logits [0, 0]: -log(1/2) = ln 2.
    # Position 1 predicts labels[2] = 1 from logits [0, ln 3]: p = 3/4, so -log(3/4).
    # labels[0] is a prompt token (-100) and is never predicted anyway; the last logits are unused.
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)], [5.0, -5.0]]])
    labels = torch.tensor([[IGNORE_INDEX, 0, 1]])
    expected = (math.log(2.0) + math.log(4.0 / 3.0)) / 2
    assert sft_loss(logits, labels).item() == pytest.approx(expected, rel=1e-6)


def test_sft_loss_ignores_masked_positions():
    logits = torch.tensor([[[0.0, 0.0], [100.0, -100.0], [0.0, 0.0]]])
    # Only the last label is scored, from logits[1] = [100, -100]: p(0) ~ 1, loss ~ 0.
    labels = torch.tensor([[7, IGNORE_INDEX, 0]])
    assert sft_loss(logits, labels).item() == pytest.approx(0.0, abs=1e-6)


def test_sequence_log_probs_sums_scored_tokens():
    # Uniform logits over 2 tokens: each scored token has log-prob -ln 2; two are scored.
    logits = torch.zeros(2, 4, 2)
    labels = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 1, 0], [IGNORE_INDEX, 1, IGNORE_INDEX, IGNORE_INDEX]])
    out = sequence_log_probs(logits, labels)
    assert out.tolist() == pytest.approx([-2 * math.log(2), -math.log(2)])
    _, mask = token_log_probs(logits, labels)
    assert mask.sum(-1).tolist() == [2, 1]


def test_dpo_loss_hand_values():
    # chosen ratio = -1 - (-2) = 1; rejected ratio = -3 - (-2) = -1;
    # beta * (1 - (-1)) = 0.5 * 2 = 1, loss = -log sigmoid(1) = log(1 + e^-1).
    losses, r_c, r_r = dpo_loss(
        torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]), beta=0.5
    )
    assert losses.item() == pytest.approx(math.log1p(math.exp(-1.0)), rel=1e-6)
    assert r_c.item() == pytest.approx(0.5)
    assert r_r.item() == pytest.approx(-0.5)


def test_dpo_loss_is_log2_when_policy_equals_reference():
    x = torch.tensor([-4.0, -7.0])
    losses, r_c, r_r = dpo_loss(x, x + 1, x, x + 1, beta=0.1)
    assert losses.tolist() == pytest.approx([math.log(2)] * 2)
    assert (r_c == 0).all() and (r_r == 0).all()


def test_dpo_loss_gradient_pushes_chosen_up():
    chosen = torch.tensor([-2.0], requires_grad=True)
    rejected = torch.tensor([-2.0], requires_grad=True)
    losses, _, _ = dpo_loss(chosen, rejected, torch.tensor([-2.0]), torch.tensor([-2.0]), beta=1.0)
    losses.sum().backward()
    # d/dc of -log sigmoid(c - r) at c = r is -1/2; at r it is +1/2.
    assert chosen.grad.item() == pytest.approx(-0.5)
    assert rejected.grad.item() == pytest.approx(0.5)


def test_selective_log_softmax_by_hand_and_against_log_softmax():
    from lightning_fed.modules.losses import selective_log_softmax

    # One row, V = 2, logits (0, ln 3): p = (1/4, 3/4).
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    out = selective_log_softmax(logits, torch.tensor([[1]]))
    torch.testing.assert_close(out, torch.tensor([[math.log(0.75)]]))
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g) * 4
    index = torch.randint(11, (3, 5), generator=g)
    expected = logits.log_softmax(-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(selective_log_softmax(logits, index), expected, rtol=0, atol=1e-5)
    half = selective_log_softmax(logits.bfloat16(), index)  # upcast per sequence
    assert half.dtype == torch.float32
    torch.testing.assert_close(half, logits.bfloat16().float().log_softmax(-1).gather(-1, index.unsqueeze(-1))[..., 0])


def test_preference_metrics_by_hand():
    from lightning_fed.modules.losses import preference_metrics

    losses = torch.tensor([0.1, 0.2, 0.3])
    out = preference_metrics(
        losses,
        torch.tensor([1.0, 0.5, 0.0]),
        torch.tensor([0.5, 0.5, 1.0]),
        torch.tensor([-3.0, -2.0, -1.0]),
        torch.tensor([-4.0, -2.0, -0.5]),
    )
    torch.testing.assert_close(out["reward_margin"], torch.tensor([0.5, 0.0, -1.0]))
    torch.testing.assert_close(out["reward_acc"], torch.tensor([1.0, 0.5, 0.0]))  # a tie counts one half
    torch.testing.assert_close(out["pref_acc"], torch.tensor([1.0, 0.0, 0.0]))
    assert out["loss"] is losses


def test_token_log_probs_equal_log_softmax_and_gather():
    """The selective form (label logit minus logsumexp) against the full ``log_softmax`` + gather it replaces:
    equal to float32 rounding in value and gradient; in bfloat16 within bfloat16's resolution of the logits."""
    g = torch.Generator().manual_seed(1)
    logits = (torch.randn(2, 6, 50, generator=g) * 3).requires_grad_(True)
    labels = torch.randint(50, (2, 6), generator=g)
    labels[0, :2] = IGNORE_INDEX
    labels[1, 4:] = IGNORE_INDEX

    def reference(x):
        mask = labels[:, 1:] != IGNORE_INDEX
        logps = x[:, :-1].float().log_softmax(-1).gather(-1, labels[:, 1:].clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return logps * mask, mask

    logps, mask = token_log_probs(logits, labels)
    expected, expected_mask = reference(logits)
    assert torch.equal(mask, expected_mask) and logps.dtype == torch.float32
    torch.testing.assert_close(logps, expected, rtol=0, atol=2e-6)
    (grad,) = torch.autograd.grad(logps.sum(), logits)
    (expected_grad,) = torch.autograd.grad(expected.sum(), logits)
    torch.testing.assert_close(grad, expected_grad, rtol=0, atol=1e-6)
    half, _ = token_log_probs(logits.detach().bfloat16(), labels)
    assert half.dtype == torch.float32
    # The bf16 logits themselves are off by up to 2^-8 relative (|logit| <= ~12 here: <= 0.05); the
    # upcast per row then computes exactly what log_softmax of the upcast bf16 logits gives.
    torch.testing.assert_close(half, reference(logits.detach().bfloat16())[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(half, expected.detach(), rtol=0, atol=0.1)
