import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_fed.modules.losses import IGNORE_INDEX, dpo_loss, sequence_log_probs, sft_loss, token_log_probs

LOSSES = Path(__file__).resolve().parents[2] / "lightning_fed" / "modules" / "losses.py"


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


def test_selective_log_softmax_gradient_and_float64():
    """The hand-written backward against finite differences (float64), and the dtype contract:
    float64 logits give float64 log-probs (double precision is kept), float32 give float32."""
    from lightning_fed.modules.losses import selective_log_softmax

    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 3, 7, generator=g, dtype=torch.float64, requires_grad=True)
    index = torch.randint(7, (2, 3), generator=g)
    assert torch.autograd.gradcheck(lambda x: selective_log_softmax(x, index), (logits,))
    labels = torch.tensor([[IGNORE_INDEX, 3, 5], [1, 2, IGNORE_INDEX]])
    logps, _ = token_log_probs(logits, labels)
    assert logps.dtype == torch.float64 and token_log_probs(logits.float(), labels)[0].dtype == torch.float32
    # By hand, one row of V = 2 with logits (0, ln 3): d/dx (x_1 - logsumexp x) = (0, 1) - (1/4, 3/4).
    x = torch.tensor([[[0.0, math.log(3.0)]]], requires_grad=True)
    selective_log_softmax(x, torch.tensor([[1]])).sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([[[-0.25, 0.25]]]))


def test_token_log_probs_saves_no_second_logits_sized_tensor():
    """What the backward keeps: the logits themselves (the LM head's output, no copy), the (B, T)
    targets and logsumexp. log_softmax + gather saved a (B, T-1, V) copy; autograd's own graph of
    the selective form kept (T, V) rows per sequence."""
    logits = torch.randn(3, 5, 11, requires_grad=True)
    labels = torch.randint(11, (3, 5))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        logps, _ = token_log_probs(logits, labels)
    big = [t for t in saved if t.numel() >= logits.numel()]
    assert len(big) == 1 and big[0].untyped_storage().data_ptr() == logits.untyped_storage().data_ptr()
    assert sum(t.numel() for t in saved if t.numel() < logits.numel()) <= 4 * 3 * 5  # targets, mask, norm


@pytest.mark.parametrize("batch", [1, 4])
def test_token_log_probs_peak_memory_is_two_logits_buffers(batch):
    """Peak RSS of one forward + backward from an LM head's (B, T, V) float32 output, in a child
    process, in units of that buffer: the logits and their gradient, plus whatever of the forward's
    per-sequence (T, V) logsumexp temporaries the allocator keeps. Measured on 2026-11-26 (2 shared
    cores, B in 1/4/8, 512 tokens, V 32768): 2.01-2.63; the full log_softmax + gather gave 2.97-3.00,
    autograd's graph of the per-row logsumexp (1cb74e7) 4.0-6.7. The bound sits under the former.
    """
    code = f"""
import importlib.util, torch
spec = importlib.util.spec_from_file_location("losses", {str(LOSSES)!r})
losses = importlib.util.module_from_spec(spec); spec.loader.exec_module(losses)
torch.set_num_threads(1)
B, T, V = {batch}, 512 // {batch}, 32768
h, w = torch.randn(B, T, 16, requires_grad=True), torch.randn(16, V)
labels = torch.randint(0, V, (B, T))
def step(h, labels):
    logits = h @ w
    logps, _ = losses.token_log_probs(logits, labels)
    del logits
    logps.sum().backward()
def kib(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field))
step(h[:1, :8].detach().requires_grad_(), labels[:1, :8])
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current RSS
before = kib("VmRSS:")
step(h, labels)
print((kib("VmHWM:") - before) * 1024 / (B * T * V * 4))
"""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    buffers = float(out.strip().splitlines()[-1])
    assert 1.5 < buffers < 2.85, buffers


def test_a_rounding_sized_margin_is_a_tie():
    """Margins of float32 rounding size (relative to the summed log-probabilities, here 200 + 200)
    count one half on every CPU, as an exact zero does; a margin just above TIE_RTOL of that size,
    and any trained one, counts whole. By hand: 1e-5 * 400 = 4e-3."""
    from lightning_fed.modules.losses import preference_metrics

    margins = torch.tensor([0.0, 3e-5, -3e-5, 3.9e-3, 4.1e-3, -4.1e-3, 0.5])
    logps = torch.full_like(margins, -200.0)
    out = preference_metrics(torch.zeros_like(margins), margins, torch.zeros_like(margins), logps, logps)
    torch.testing.assert_close(out["reward_acc"], torch.tensor([0.5, 0.5, 0.5, 0.5, 1.0, 0.0, 1.0]))
