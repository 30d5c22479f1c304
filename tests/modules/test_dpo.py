"""DPOModule: the reference is the adapter-free model, one forward for both responses."""

import math

import pytest
import torch

from lightning_fed.datamodules.tokenize import PadCollator, tokenize_preference
from lightning_fed.modules.reference_cache import attended_lengths, example_rows
from tests.helpers.runs import tiny_dpo


@pytest.fixture
def module_and_batch():
    module = tiny_dpo(seed=1)
    tok = module.tokenizer
    items = [
        tokenize_preference("Rate it.\n", "Truly great.", "Truly awful.", tok, 64, "error"),
        tokenize_preference("A longer prompt here.\n", "Fine, cheers!!", "Fine, regards.", tok, 64, "error"),
    ]
    return module, PadCollator(tok.pad_token_id)(items)


def randomize_lora(module):
    with torch.no_grad():
        for p in module.shared_parameters().values():
            p.normal_(0, 0.5)


def test_metrics_at_initialisation(module_and_batch):
    module, batch = module_and_batch
    m = module.pair_metrics(batch)  # LoRA B = 0: the policy is the reference
    assert m["loss"].tolist() == pytest.approx([math.log(2)] * 2)
    assert m["reward_margin"].tolist() == [0.0, 0.0]
    assert m["reward_acc"].tolist() == [0.5, 0.5]


def test_reference_is_the_model_without_adapters(module_and_batch):
    module, batch = module_and_batch
    randomize_lora(module)
    ref_chosen, ref_rejected = module.reference_log_probs(batch)
    policy_chosen, _ = module.sequence_log_probs(batch)
    assert not torch.allclose(ref_chosen, policy_chosen)
    with torch.no_grad():
        for p in module.shared_parameters().values():
            p.zero_()
        base_chosen, base_rejected = module.sequence_log_probs(batch)
    torch.testing.assert_close(ref_chosen, base_chosen)
    torch.testing.assert_close(ref_rejected, base_rejected)
    assert not ref_chosen.requires_grad


def test_concatenated_forward_equals_separate_forwards(module_and_batch):
    module, batch = module_and_batch
    randomize_lora(module)
    chosen, rejected = module.sequence_log_probs(batch)
    from lightning_fed.modules.losses import sequence_log_probs

    for name, joint in (("chosen", chosen), ("rejected", rejected)):
        logits = module.model(
            input_ids=batch[f"{name}_input_ids"], attention_mask=batch[f"{name}_attention_mask"]
        ).logits
        torch.testing.assert_close(sequence_log_probs(logits, batch[f"{name}_labels"]), joint, rtol=1e-5, atol=1e-5)


def test_training_step_moves_only_adapters(module_and_batch):
    module, batch = module_and_batch
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    opt = module.configure_optimizers()
    for _ in range(3):
        loss = module.pair_metrics(batch)["loss"].mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    changed = {n for n, p in module.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert module.pair_metrics(batch)["reward_margin"].mean() > 0


def test_bad_hyperparameters_are_named():
    from lightning_fed.modules import BackboneConfig, DPOModule

    cfg = BackboneConfig(config={"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2}, tokenizer="bytes")
    with pytest.raises(ValueError, match=r"model.beta must be in \(0, 1000.0\], got 0"):
        DPOModule(cfg, beta=0)
    with pytest.raises(ValueError, match="model.optimizer must be one of"):
        DPOModule(cfg, optimizer="adam")


def test_dropout_is_disabled_for_dpo_but_the_model_trains(module_and_batch):
    module, batch = module_and_batch
    randomize_lora(module)
    assert module.model.training  # not left in a loaded model's eval mode
    a, _ = module.sequence_log_probs(batch)
    b, _ = module.sequence_log_probs(batch)
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_sft_keeps_dropout_active_in_training():
    import lightning.pytorch as pl

    from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule

    pl.seed_everything(0, verbose=False)
    cfg = BackboneConfig(config={"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2}, tokenizer="bytes")
    module = SFTModule(cfg, lora=LoraSettings(r=2, dropout=0.5))
    lora_dropouts = [
        m for n, m in module.model.named_modules() if "lora_dropout" in n and isinstance(m, torch.nn.Dropout)
    ]
    assert lora_dropouts and all(m.training and m.p == 0.5 for m in lora_dropouts)


def test_configs_given_as_dicts_become_dataclasses():
    from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule

    module = SFTModule(
        {"config": {"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2}, "tokenizer": "bytes"},
        lora={"r": 2, "alpha": 4},
    )
    assert isinstance(module.hparams.backbone, BackboneConfig)
    assert module.hparams.lora == LoraSettings(r=2, alpha=4)


def shuffled_pairs():
    from lightning_fed.modules.backbone import byte_tokenizer

    tok = byte_tokenizer()
    texts = [
        ("Rate it.\n", "Truly great.", "Truly awful."),
        ("A longer prompt here.\n", "Fine, cheers!!", "Fine, regards."),
        ("x\n", "y" * 30, "z" * 5),
        ("Hello there, how\n", "good", "bad and a long answer here"),
    ]
    items = [tokenize_preference(p, c, r, tok, 128, "error") for p, c, r in texts]
    collate = PadCollator(tok.pad_token_id)
    # The second batch mixes seen examples (other positions, other padding) with a new one.
    return collate(items[:3]), collate([items[3], items[2], items[0]])


def loss_and_grads(module, batch):
    loss = module.pair_metrics(batch)["loss"].mean()
    params = [p for p in module.shared_parameters().values()]
    return loss.detach(), torch.autograd.grad(loss, params)


@pytest.mark.parametrize("precision", ["32", "bf16"])
def test_cached_reference_gives_the_recomputed_loss_and_gradients(precision):
    cached, plain = tiny_dpo(seed=3), tiny_dpo(seed=3)
    plain.reference_cache = None
    assert cached.reference_cache is not None  # on by default: DPO disables dropout
    for module in (cached, plain):
        torch.manual_seed(7)
        randomize_lora(module)
    first, second = shuffled_pairs()
    context = (
        torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else torch.autocast("cpu", enabled=False)
    )
    with context:
        torch.manual_seed(0)
        a_first, a_second = loss_and_grads(cached, first), loss_and_grads(cached, second)
        rng_cached = torch.get_rng_state()
        torch.manual_seed(0)
        b_first, b_second = loss_and_grads(plain, first), loss_and_grads(plain, second)
        rng_plain = torch.get_rng_state()
    assert torch.equal(rng_cached, rng_plain)  # no RNG draw skipped or added
    assert (cached.reference_cache.hits, cached.reference_cache.misses) == (2, 4)
    # The cache computes each example alone (reference_cache.py), the plain module in the batch:
    # another batch composition changes a float32 reduction's rounding only (assert_close's
    # default float32 tolerance); under bf16 autocast the matmuls round to bfloat16, so a logit may
    # move by one bf16 ulp: bfloat16's default rtol, and an atol of one bf16 ulp (2**-8 relative)
    # at each tensor's largest element (the gradients' small elements are sums that cancel).
    for a, b in ((a_first, b_first), (a_second, b_second)):
        for x, y in zip((a[0], *a[1]), (b[0], *b[1])):
            tol = {"rtol": 1.6e-2, "atol": 2**-8 * float(y.abs().max())} if precision == "bf16" else {}
            torch.testing.assert_close(x, y, **tol)


def alone(module, batch):
    """Each example's reference computed on its own, cut to its own length (no cache)."""
    lengths = attended_lengths(batch)
    pairs = [module.compute_reference_log_probs(example_rows(batch, i, n)) for i, n in enumerate(lengths)]
    return torch.cat([c for c, _ in pairs]), torch.cat([r for _, r in pairs])


def test_cached_reference_does_not_depend_on_the_batch_an_example_is_first_seen_in():
    """Issue 23: a float32 forward of an example moves with its batch's padded width (here the short
    example's rejected row, 204 tokens, padded to 249 changes its summed log-prob by an ulp), and the
    in-process loop and a Flower client meet an example first in different batches. The cached
    reference is the example's own, whichever batch it came in."""
    tok = tiny_dpo(seed=3).tokenizer
    texts = [
        ("Hi\n", "yes", "x" * 200),
        ("Tell me a long story about a cat and a dog.\n", "Once upon a time " * 12, "The end. " * 20),
        ("Rate the film in one word.\n", "Truly great, I loved it.", "Truly awful."),
    ]
    items = [tokenize_preference(p, c, r, tok, 512, "error") for p, c, r in texts]
    collate = PadCollator(tok.pad_token_id)
    first, second = tiny_dpo(seed=3), tiny_dpo(seed=3)
    a = first.reference_log_probs(collate(items[:1]))  # alone
    b = second.reference_log_probs(collate([items[1], items[0], items[2]]))  # padded to the long one
    assert torch.equal(a[0], b[0][1:2]) and torch.equal(a[1], b[1][1:2])
    # The cache's values are the examples' own, computed without it.
    wide = collate([items[1], items[0], items[2]])
    for got, own in zip(b, alone(second, wide)):
        assert torch.equal(got, own)
    # Served again in yet another batch: the same floats.
    c = first.reference_log_probs(collate([items[2], items[0]]))
    assert torch.equal(c[0][1:], a[0]) and torch.equal(c[1][1:], a[1])


def test_cache_reference_option_and_dropout(tmp_path):
    from lightning_fed.modules import BackboneConfig, DPOModule

    cfg = BackboneConfig(config={"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2}, tokenizer="bytes")
    assert DPOModule(cfg, cache_reference=False).reference_cache is None
    # gpt2's default resid/attn/embd dropout 0.1 stays active: the reference is random, no cache.
    assert DPOModule(cfg, disable_dropout=False).reference_cache is None
    with pytest.raises(ValueError, match="model.cache_reference=true needs a deterministic reference"):
        DPOModule(cfg, disable_dropout=False, cache_reference=True)
    module = DPOModule(cfg, reference_cache_bytes=0, reference_cache_dir=str(tmp_path))
    assert module.reference_cache.max_memory_bytes == 0 and module.reference_cache.spill_dir == tmp_path
    with pytest.raises(ValueError, match="model.reference_cache_bytes must be >= 0, got -1"):
        DPOModule(cfg, cache_reference=False, reference_cache_bytes=-1)


def test_federated_run_is_the_same_with_and_without_the_cache(tmp_path):
    """Two federated runs, with and without the reference cache, end with the same global state.

    Bit-identical as long as every example is seen in one batch composition; a seen example in
    another batch gets the value of its first batch, which the recomputation may round differently
    in the last bit (float32 reductions depend on the batch's shape and on the CPU's kernels), and
    AdamW, dividing each gradient by its own running scale, can turn that last bit into a visible
    part of a step on a near-zero component. Measured spread (``benchmarks/float_paths.py``,
    RESULTS.md "Float paths"): 0 with AVX512 kernels (1 or 2 threads); with AVX2 kernels a relative
    difference of 1.33e-3 on LoRA B values of at most ~4e-2, so at most ~5.3e-5 absolute; past rtol
    1e-5 on another machine of two busy cores (issue 41). The tolerance is ``atol = 0.1 * lr =
    5e-4`` (rtol 0), 10% of one AdamW step and ~9x the largest spread measured; a cache serving wrong
    reference log-probs changes the DPO loss itself, so every step, by up to ``lr``.
    """
    from lightning_fed.callbacks import FederatedLoop
    from tests.helpers.runs import fit, preference_data

    states = {}
    for cache in (True, False):
        module = tiny_dpo(seed=0)
        if not cache:
            module.reference_cache = None
        # 4 local steps over 3 batches per client: examples come back, in other batches.
        loop = FederatedLoop(rounds=2, clients_per_round=1, local_steps=4, seed=0)
        fit(
            module, preference_data(num_clients=2, per_client=12), loop, str(tmp_path / str(cache)), limit_val_batches=0
        )
        states[cache] = loop.server.global_state
        if cache:
            assert module.reference_cache.hits > 0 and module.reference_cache.misses > 0
    assert states[True].keys() == states[False].keys()
    lr = 5e-3  # tiny_dpo's
    for name in states[True]:
        torch.testing.assert_close(states[True][name], states[False][name], rtol=0, atol=0.1 * lr, msg=name)
    assert max(v.abs().max() for k, v in states[True].items() if "lora_B" in k) > 1e-2


def test_pdpo_reference_is_fixed_so_its_cache_is_exact():
    from lightning_fed.modules import PDPOModule
    from tests.helpers.personal import tiny

    module = tiny(PDPOModule)
    first, _ = shuffled_pairs()
    cached = module.reference_log_probs(first)  # first sight: computed and stored
    assert module.reference_cache.misses == 3
    with torch.no_grad():  # every trainable parameter moves: LoRA, personal head, bottleneck, reward head
        for p in module.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.3)
    recomputed = alone(module, first)  # the cache computes each example on its own
    served = module.reference_log_probs(first)
    assert module.reference_cache.hits == 3
    for a, b, c in zip(cached, recomputed, served):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert not torch.equal(module.sequence_log_probs(first)[0], cached[0])  # the policy did move


def test_a_private_run_keeps_no_reference_cache():
    """The cache is keyed by each example's content and saved in the checkpoint: in a private run it
    would show whoever holds the run folder which clients were sampled (found from outside, issue 40)."""
    from lightning_fed.modules import BackboneConfig, DPOModule

    cfg = BackboneConfig(config={"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2}, tokenizer="bytes")
    module = DPOModule(cfg)
    assert module.reference_cache is not None
    module.keep_no_example_record()
    assert module.reference_cache is None
    checkpoint: dict = {"state_dict": {}}
    module.on_save_checkpoint(checkpoint)
    assert "reference_cache" not in checkpoint
    with pytest.raises(ValueError, match=r"^model.cache_reference=true in a private run: the cache would record"):
        DPOModule(cfg, cache_reference=True).keep_no_example_record()
