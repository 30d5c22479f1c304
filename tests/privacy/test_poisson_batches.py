"""Issue 32, item 1: DP-SGD's batches are Poisson samples at rate ``B / |D_k|`` (what the
example-level accountant's amplification assumes, Opacus' ``UniformWithReplacementSampler``), drawn
from a secret seed; an empty one is a step of noise alone."""

import pytest
import torch

from lightning_fed.datamodules.round_sampler import EMPTY_BATCH, EmptyBatchCollate, RoundBatchSampler
from lightning_fed.federation.secret_seed import SecretSeed, standard_normal
from lightning_fed.federation.turn import TurnPlan
from lightning_fed.privacy.dp_sgd import _NO_TURN, _NOISE_TAG

SIZES, OFFSETS = [20, 10], [0, 20]


def _batches(seed, steps=400):
    turns = [TurnPlan(0, steps), TurnPlan(1, steps)]
    sampler = RoundBatchSampler(turns, OFFSETS, SIZES, 4, seed=0, round_idx=3, poisson_seed=seed)
    out = list(sampler)
    return out[:steps], out[steps:]


def test_each_example_is_in_each_batch_with_probability_b_over_n():
    """400 steps, B = 4: client 0 (20 examples, rate 0.2) and client 1 (10, rate 0.4). An example's
    inclusion frequency has standard error <= sqrt(0.4 * 0.6 / 400) = 0.025: margin 0.1 (4 of them);
    the mean batch size has standard error <= sqrt(20 * 0.2 * 0.8) / 20 = 0.09: margin 0.4."""
    for batches, (n, base) in zip(_batches(5), zip(SIZES, OFFSETS)):
        assert all(base <= i < base + n for b in batches for i in b)
        assert all(len(set(b)) == len(b) for b in batches)  # an example at most once per step
        freq = torch.zeros(n)
        for b in batches:
            freq[[i - base for i in b]] += 1
        assert float((freq / len(batches) - 4 / n).abs().max()) < 0.1
        assert abs(sum(map(len, batches)) / len(batches) - 4) < 0.4
        assert len({len(b) for b in batches}) > 3  # sizes vary: not fixed-size batches
    assert any(len(b) == 0 for b in _batches(5)[0])  # 0.8^20: about 4.6 empty steps of 400 expected


def test_the_batches_follow_the_secret_seed_only():
    assert _batches(5) == _batches(5)
    assert _batches(5) != _batches(6)
    turns = [TurnPlan(0, 3)]
    public = RoundBatchSampler(turns, OFFSETS, SIZES, 4, seed=0, round_idx=3, poisson_seed=5)
    other = RoundBatchSampler(turns, OFFSETS, SIZES, 4, seed=99, round_idx=3, poisson_seed=5)
    assert list(public) == list(other)  # the config's seed plays no part


def test_poisson_batches_need_one_process_and_empty_ones_collate_to_the_marker():
    with pytest.raises(ValueError, match="Poisson batches .DP-SGD. need one process, got 2"):
        RoundBatchSampler([TurnPlan(0, 1)], OFFSETS, SIZES, 4, 0, 0, rank=0, num_replicas=2, poisson_seed=1)
    collate = EmptyBatchCollate(lambda items: {"x": torch.tensor(items)})
    assert set(collate([])) == {EMPTY_BATCH}
    assert torch.equal(collate([1, 2])["x"], torch.tensor([1, 2]))


def test_a_dp_sgd_step_on_an_empty_batch_is_the_noise_alone_by_hand():
    """z = 2, C = 0.5, B = 4: each trainable tensor's gradient is z C / B * n = 0.25 n, n the
    step's standard normal draws (tensors in order, one generator per step)."""
    from lightning_fed.modules import BackboneConfig, LoraSettings
    from lightning_fed.privacy import DPSFTModule, DPSGDSettings
    from tests.helpers.runs import TINY_GPT2

    settings = DPSGDSettings(clip_norm=0.5, noise_multiplier=2.0, expected_batch_size=4, seed=11)
    module = DPSFTModule(
        BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"), lora=LoraSettings(r=2), dp_sgd=settings
    )
    loss = module.training_step({EMPTY_BATCH: torch.zeros(0, dtype=torch.long)}, 0)
    loss.backward()
    module.on_after_backward()
    g = SecretSeed.of_int(11).generator("dp-sgd noise", _NOISE_TAG, _NO_TURN)
    params = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
    assert params
    for name, p in params:
        torch.testing.assert_close(p.grad, standard_normal(p.shape, g) * 0.25, msg=name)
