import pytest
import torch

from lightning_fed.privacy import clip_to_norm, global_norm, per_example_clip_factors


def test_flat_clip_scales_all_tensors_by_one_factor():
    v = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([[4.0]])}
    assert global_norm(v) == pytest.approx(5.0)  # sqrt(9 + 16)
    clipped, norm = clip_to_norm(v, 1.0)  # factor 1 / 5
    assert norm == pytest.approx(5.0)
    torch.testing.assert_close(clipped["a"], torch.tensor([0.6, 0.0]))
    torch.testing.assert_close(clipped["b"], torch.tensor([[0.8]]))
    assert global_norm(clipped) == pytest.approx(1.0)


def test_short_vectors_and_zero_are_left_alone():
    v = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([[4.0]])}
    clipped, _ = clip_to_norm(v, 10.0)
    torch.testing.assert_close(clipped["a"], v["a"])
    zero, norm = clip_to_norm({"a": torch.zeros(3)}, 1.0)
    assert norm == 0.0 and torch.equal(zero["a"], torch.zeros(3))


def test_per_example_factors_by_hand():
    # norms 0.5 (kept), 2 (halved), 4 (quartered) at C = 1
    factors = per_example_clip_factors(torch.tensor([0.5, 2.0, 4.0, 0.0]), 1.0)
    torch.testing.assert_close(factors, torch.tensor([1.0, 0.5, 0.25, 1.0]))


def test_clip_norm_must_be_positive():
    with pytest.raises(ValueError, match="`clip_norm` must be > 0, got 0.0"):
        clip_to_norm({"a": torch.ones(1)}, 0.0)
