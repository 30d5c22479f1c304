import warnings

import lightning.pytorch as pl
import pytest
import torch

from lightning_fed.datamodules.tokenize import PadCollator, tokenize_preference, tokenize_sft
from lightning_fed.modules import BackboneConfig, LoraSettings
from lightning_fed.privacy.dp_sgd import (
    DPDPOModule,
    DPSFTModule,
    DPSGDSettings,
    check_trainer_for_dp_sgd,
    example_level_accountant,
    privatize_per_example,
)
from tests.helpers.runs import TINY_GPT2, tiny_llama

# No backbone dropout: the batched and the one-by-one forwards must see the same network.
CONFIG = {**TINY_GPT2, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
# SmolLM2's architecture (rotary buffers, grouped-query attention), tiny
LLAMA = tiny_llama(max_position_embeddings=128)


def test_privatize_by_hand():
    # example 0: [3, 4] (norm 5 -> [0.6, 0.8]); example 1: [0.3, 0] kept; mean over |L| = 2
    out, norms = privatize_per_example({"w": torch.tensor([[3.0, 4.0], [0.3, 0.0]])}, 1.0, 0.0, 2)
    torch.testing.assert_close(norms, torch.tensor([5.0, 0.3]))
    torch.testing.assert_close(out["w"], torch.tensor([0.45, 0.4]))
    # the norm is over all tensors of an example together: [3] and [4] -> norm 5
    out, _ = privatize_per_example({"a": torch.tensor([[3.0]]), "b": torch.tensor([[4.0]])}, 1.0, 0.0, 1)
    assert (float(out["a"]), float(out["b"])) == pytest.approx((0.6, 0.8))


def test_noise_std_is_z_c_over_batch():
    """z = 1.5, C = 2, |L| = 4: std z C / |L| = 0.75. 200,000 coordinates: the sample std's
    relative spread is 1 / sqrt(4e5) = 0.16%; 1% is > 6 of them."""
    g = torch.Generator().manual_seed(0)
    out, _ = privatize_per_example({"w": torch.zeros(4, 200_000)}, 2.0, 1.5, 4, g)
    assert float(out["w"].std()) == pytest.approx(0.75, rel=0.01)
    assert abs(float(out["w"].mean())) < 5 * 0.75 / 200_000**0.5


def _sft(clip_norm=1e6, noise=0.0, ffa=False, config=CONFIG):
    pl.seed_everything(0, verbose=False)
    return DPSFTModule(
        BackboneConfig(config=dict(config), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        dp_sgd=DPSGDSettings(clip_norm=clip_norm, noise_multiplier=noise, ffa_lora=ffa, seed=0),
    )


def _randomize_lora(module):
    with torch.no_grad():
        for p in module.shared_parameters().values():
            p.normal_(0, 0.3)


def _dp_grads(module, batch):
    module.zero_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log without a Trainer
        module.training_step(batch, 0).backward()
    module.on_after_backward()
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.requires_grad}


def _one_by_one(module, items, collate):
    """Each example's own gradient, from its own backward (no hooks involved in the reference)."""
    grads = []
    for item in items:
        module.zero_grad()
        module.per_example_losses(collate([item])).sum().backward()
        grads.append({n: p.grad.clone() for n, p in module.named_parameters() if p.requires_grad})
        for p in module.parameters():
            p.grad_sample = None
    return grads


def _sft_items(tok):
    texts = [("Say hi.\n", "Hello there."), ("Count.\n", "one two three four"), ("Q?\n", "A.")]
    return [tokenize_sft(p, r, tok, 64, "error") for p, r in texts]


@pytest.mark.parametrize("config", [CONFIG, LLAMA], ids=["gpt2", "llama"])
def test_sft_per_example_gradients_are_each_examples_own(config):
    module = _sft(config=config)
    _randomize_lora(module)
    collate = PadCollator(module.tokenizer.pad_token_id)
    items = _sft_items(module.tokenizer)
    dp = _dp_grads(module, collate(items))  # C huge, z = 0: the plain mean of per-example gradients
    own = _one_by_one(module, items, collate)
    for name, g in dp.items():
        torch.testing.assert_close(g, sum(o[name] for o in own) / 3, rtol=1e-4, atol=1e-6)


def test_sft_gradients_are_clipped_per_example():
    module = _sft(clip_norm=1e-3)
    _randomize_lora(module)
    collate = PadCollator(module.tokenizer.pad_token_id)
    items = _sft_items(module.tokenizer)
    dp = _dp_grads(module, collate(items))
    own = _one_by_one(module, items, collate)
    norms = [sum(float(g.pow(2).sum()) for g in o.values()) ** 0.5 for o in own]
    assert min(norms) > 1e-3  # every example is clipped
    torch.testing.assert_close(module.last_example_norms, torch.tensor(norms), rtol=1e-4, atol=0)
    for name, g in dp.items():
        expected = sum(o[name] * (1e-3 / n) for o, n in zip(own, norms)) / 3
        torch.testing.assert_close(g, expected, rtol=1e-4, atol=1e-9)
    total = sum(float(g.pow(2).sum()) for g in dp.values()) ** 0.5
    assert total <= 1e-3 + 1e-9  # the mean of three vectors of norm C


def test_an_example_twice_in_a_batch_counts_once():
    """Where a pass ends inside a batch an example can be drawn twice: its second copy must add
    nothing, or the step's sensitivity would be 2C. z = 0, C small: the sum of clipped gradients
    of [x, x, y] (divided by 3) equals that of [x, y] (divided by 2)."""
    module = _sft(clip_norm=1e-3)
    _randomize_lora(module)
    collate = PadCollator(module.tokenizer.pad_token_id)
    x, y, _ = _sft_items(module.tokenizer)
    twice = _dp_grads(module, collate([x, y, x]))
    assert module.last_example_norms[2] == 0
    once = _dp_grads(module, collate([x, y]))
    for name, g in twice.items():
        torch.testing.assert_close(g * 3, once[name] * 2, rtol=1e-4, atol=1e-9)


def test_dpo_example_is_the_pair():
    pl.seed_everything(0, verbose=False)
    module = DPDPOModule(
        BackboneConfig(config=dict(CONFIG), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        dp_sgd=DPSGDSettings(clip_norm=1e6, noise_multiplier=0.0, seed=0),
    )
    _randomize_lora(module)
    tok = module.tokenizer
    items = [
        tokenize_preference("Rate it.\n", "Truly great.", "Truly awful.", tok, 64, "error"),
        tokenize_preference("A longer prompt here.\n", "Fine, cheers!!", "Fine, regards.", tok, 64, "error"),
    ]
    collate = PadCollator(tok.pad_token_id)
    dp = _dp_grads(module, collate(items))
    own = _one_by_one(module, items, collate)
    for name, g in dp.items():
        torch.testing.assert_close(g, (own[0][name] + own[1][name]) / 2, rtol=1e-4, atol=1e-6)


def test_noise_on_the_module_step_has_std_z_c_over_batch():
    """z = 4, C = 1e-6 (the clipped signal is negligible), 3 examples: std z C / 3 over the ~1000
    LoRA coordinates of the tiny model; the sample std's relative spread is ~2.2%, tolerance 10%."""
    module = _sft(clip_norm=1e-6, noise=4.0)
    collate = PadCollator(module.tokenizer.pad_token_id)
    dp = _dp_grads(module, collate(_sft_items(module.tokenizer)))
    flat = torch.cat([g.flatten() for g in dp.values()])
    assert flat.numel() > 900
    assert float(flat.std()) == pytest.approx(4.0 * 1e-6 / 3, rel=0.1)


def test_ffa_lora_trains_and_sends_only_b():
    module = _sft(ffa=True)
    shared = module.shared_parameters()
    assert shared and all("lora_B" in n for n in shared)
    assert all(not p.requires_grad for n, p in module.named_parameters() if "lora_A" in n)
    collate = PadCollator(module.tokenizer.pad_token_id)
    dp = _dp_grads(module, collate(_sft_items(module.tokenizer)))
    assert set(dp) == {n for n in shared}


def test_example_level_accountant_uses_the_smallest_client():
    acc = example_level_accountant(
        DPSGDSettings(noise_multiplier=1.0), batch_size=4, smallest_client_examples=40, delta=1e-5
    )
    assert acc.sample_rate == 0.1 and acc.noise_multiplier == 1.0
    assert acc.epsilon(100) > acc.epsilon(10) > 0


def test_bad_settings_are_listed_together():
    with pytest.raises(
        ValueError, match="model.dp_sgd.clip_norm must be a number > 0, got 0; model.dp_sgd.noise_multiplier"
    ):
        DPSGDSettings(clip_norm=0, noise_multiplier=-1)
    with pytest.raises(
        ValueError, match="^give exactly one of model.dp_sgd.noise_multiplier and model.dp_sgd.target_e"
    ):
        DPSGDSettings(noise_multiplier=1.0, target_epsilon=2.0)
    with pytest.raises(ValueError, match="^give exactly one of .* got noise_multiplier=None, target_epsilon=None$"):
        DPSGDSettings()


def test_trainer_settings_that_would_break_dp_sgd_are_refused():
    check_trainer_for_dp_sgd(1, 1)
    with pytest.raises(
        ValueError,
        match=r"model.dp_sgd: trainer.accumulate_grad_batches must be 1, got 4; one process only .*got world size 2",
    ):
        check_trainer_for_dp_sgd(4, 2)
