"""FedBiOT's alignment objective, Eq. (2): the L2 term's reductions worked out by hand, and the
loss on the tiny offsite model (``off`` leaves lambda * KL, ``mean`` is ``sum`` over d)."""

import pytest
import torch

from lightning_fed.round_hooks.alignment_loss import alignment_loss, emulator_l2
from tests.helpers.offsite import offsite_module, one_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_thread")


def test_l2_term_reductions_by_hand():
    """``emulator_l2`` on a 2-token, d=2 toy: each reduction against hand arithmetic."""
    h_full = torch.tensor([[[1.0, 3.0], [2.0, 0.0], [9.0, 9.0]]])  # third token is padding
    h_emu = torch.tensor([[[0.0, 1.0], [2.0, 2.0], [0.0, 0.0]]])
    real = torch.tensor([[True, True, False]])
    # squared differences: token 1 (1, 4), token 2 (0, 4); padding left out
    # sum:  per-token ||.||^2 = 5 and 4, mean over tokens = 4.5 (Eq. (2) as printed)
    assert emulator_l2(h_emu, h_full, real, "sum").item() == pytest.approx(4.5)
    # mean: over tokens and the d = 2 dimensions, (1 + 4 + 0 + 4) / 4 = 2.25 = 4.5 / d
    assert emulator_l2(h_emu, h_full, real, "mean").item() == pytest.approx(2.25)
    # rms: 2.25 / mean(E*^2) = 2.25 / ((1 + 9 + 4 + 0) / 4) = 2.25 / 3.5
    assert emulator_l2(h_emu, h_full, real, "rms").item() == pytest.approx(2.25 / 3.5)
    assert emulator_l2(h_emu, h_full, real, "off").item() == 0.0
    with pytest.raises(ValueError, match="must be one of"):
        emulator_l2(h_emu, h_full, real, "max")


def test_l2_term_off_is_lambda_kl_and_mean_is_sum_over_d():
    """On the tiny model: ``off`` trains on lambda * KL only; ``mean`` = ``sum`` / hidden size."""
    module = offsite_module("fedbiot", beta=0.5, adapter_layers=2).eval()
    g = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(0, 256, (2, 12), generator=g),
        "attention_mask": torch.ones(2, 12, dtype=torch.long),
    }
    with torch.no_grad():
        loss_sum, l2_sum, kl = alignment_loss(module, batch, lam=2.0)
        loss_mean, l2_mean, kl_mean = alignment_loss(module, batch, lam=2.0, l2_term="mean")
        loss_off, l2_off, kl_off = alignment_loss(module, batch, lam=2.0, l2_term="off")
    d = module.model.config.hidden_size
    assert l2_sum.item() > 0 and kl.item() > 0
    assert l2_mean.item() == pytest.approx(l2_sum.item() / d, rel=1e-5)
    assert loss_mean.item() == pytest.approx(l2_sum.item() / d + 2.0 * kl.item(), rel=1e-5)
    assert loss_off.item() == pytest.approx(2.0 * kl.item(), rel=1e-5)  # the L2 has no say
    assert l2_off.item() == pytest.approx(l2_sum.item(), rel=1e-5)  # still reported, for monitoring
    assert kl_mean.item() == pytest.approx(kl.item()) and kl_off.item() == pytest.approx(kl.item())
