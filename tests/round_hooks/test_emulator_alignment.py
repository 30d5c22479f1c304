"""EmulatorAlignment (FedBiOT Eq. (2)): it lowers the KL to the full model, trains only the
emulator, reads its public set from any source, and resumes exactly (the emulator is server state)."""

import json

import pytest
import torch

from lightning_fed.round_hooks import EmulatorAlignment
from lightning_fed.round_hooks.alignment_loss import alignment_loss
from tests.helpers.offsite import offsite_module, one_thread, public_alignment, run_method  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_thread")


def test_alignment_lowers_kl_to_the_full_model():
    module = offsite_module("fedbiot", beta=0.5, adapter_layers=2)
    hook = public_alignment()
    before_params = {n: p.detach().clone() for n, p in module.named_parameters()}
    flags = {n: p.requires_grad for n, p in module.named_parameters()}
    before = hook.divergence(module)
    hook.align(module, steps=30, seed=0)
    after = hook.divergence(module)
    # Measured: KL 0.090 -> 0.018, L2 1.29 -> 0.29 (per token, first 32 public examples, 30 SGD steps).
    assert after["kl"] < 0.3 * before["kl"], (before, after)
    assert after["l2"] < 0.5 * before["l2"], (before, after)
    emulator = set(module.emulator_parameters())
    changed = {n for n, p in module.named_parameters() if not torch.equal(p, before_params[n])}
    assert changed and changed <= emulator  # only w_E moves; adapter, E*, embeddings do not
    assert {n: p.requires_grad for n, p in module.named_parameters()} == flags
    assert all(p.grad is None for p in module.parameters())


def test_non_finite_alignment_loss_is_an_error_not_a_nan_emulator():
    module = offsite_module("fedbiot", beta=0.5, adapter_layers=2)
    flags = {n: p.requires_grad for n, p in module.named_parameters()}
    with torch.no_grad():
        next(iter(module.emulator_parameters().values())).fill_(float("nan"))  # what a diverged step leaves
    with pytest.raises(FloatingPointError, match="at step 1 of 3; lower alignment.lr") as err:
        public_alignment().align(module, steps=3, seed=0)
    assert "\n" not in str(err.value)
    assert {n: p.requires_grad for n, p in module.named_parameters()} == flags and module.training


def test_no_drop_means_no_divergence():
    """With beta = 0 the emulator is a copy of E*: both terms of Eq. (2) are zero."""
    module = offsite_module("fedbiot", beta=0.0, adapter_layers=2)
    batch = {"input_ids": torch.randint(0, 256, (2, 12)), "attention_mask": torch.ones(2, 12, dtype=torch.long)}
    with torch.no_grad():
        _, l2, kl = alignment_loss(module.eval(), batch, lam=1.0)
    assert l2.item() == pytest.approx(0.0, abs=1e-8) and kl.item() == pytest.approx(0.0, abs=1e-6)


def test_public_set_from_a_local_file(tmp_path):
    path = tmp_path / "public.jsonl"
    rows = [{"question": f"Say {w}.", "answer": w} for w in ("alpha", "beta", "gamma")]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    hook = EmulatorAlignment(
        dataset=str(path), field_map={"instruction": "question", "output": "answer"}, template="plain"
    )
    module = offsite_module("fedbiot", adapter_layers=2)
    examples = hook.public_examples(module.tokenizer)
    assert len(examples) == 3 and module.tokenizer.decode(examples[0]).endswith("alpha")


def test_public_texts_follow_the_chat_template(tmp_path):
    """``template: chat`` renders public instruction and preference rows as the run's chat turns
    (system prompt, user, assistant with its end-of-turn marker), as the federated data does."""
    from tests.datamodules.test_chat_template import chatml_tokenizer

    tok = chatml_tokenizer()
    inst, pref = tmp_path / "inst.jsonl", tmp_path / "pref.jsonl"
    inst.write_text(json.dumps({"instruction": "Say alpha.", "output": "alpha"}))
    pref.write_text(json.dumps({"prompt": "Pick one.", "chosen": "this", "rejected": "that"}))
    hook = EmulatorAlignment(dataset=str(inst), template="chat", system_prompt="Be brief.")
    text = tok.decode(hook.public_examples(tok)[0])
    expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay alpha.<|im_end|>\n"
    assert text == expected + "<|im_start|>assistant\nalpha<|im_end|>"
    hook = EmulatorAlignment(dataset=str(pref), kind="preference", template="chat")
    text = tok.decode(hook.public_examples(tok)[0])
    assert text.endswith("<|im_start|>user\nPick one.<|im_end|>\n<|im_start|>assistant\nthis<|im_end|>")
    assert "SmolLM" in text  # the template's default system turn, as in training
    with pytest.raises(ValueError, match=r"federation.hooks\[\].template must be one of"):
        EmulatorAlignment(template="chatml")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps_per_round": -1}, r"federation.hooks\[\].steps_per_round must be >= 0"),
        ({"kl_direction": "backward"}, r"federation.hooks\[\].kl_direction must be one of"),
        ({"lam": -1.0}, r"federation.hooks\[\].lam must be >= 0"),
        ({"optimizer": "lbfgs"}, r"federation.hooks\[\].optimizer must be one of"),
    ],
)
def test_bad_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        EmulatorAlignment(**kwargs)
    assert "\n" not in str(err.value)


def test_resume_equals_uninterrupted(tmp_path):
    """2 rounds, stop, resume to 4 == 4 straight: adapter, emulator and alignment state."""
    short = {
        "local_steps": 2,
        "distill_steps": 4,
        "steps_per_round": 2,
        "num_sanity_val_steps": 0,
        "limit_val_batches": 1,
    }
    straight, s_hook, s_module = run_method("fedbiot", str(tmp_path / "straight"), rounds=4, **short)
    first, f_hook, f_module = run_method("fedbiot", str(tmp_path / "first"), rounds=2, **short)
    ckpt = str(tmp_path / "first" / "ckpt" / "last.ckpt")
    resumed, r_hook, r_module = run_method("fedbiot", str(tmp_path / "resumed"), rounds=4, ckpt_path=ckpt, **short)
    assert len(resumed.server.report.history) == 4 and r_hook.version == s_hook.version
    emu_first, emu_straight, emu_resumed = (m.emulator_parameters() for m in (f_module, s_module, r_module))
    assert not all(torch.equal(emu_first[k], emu_straight[k]) for k in emu_straight)  # not trivial
    for k in emu_straight:
        torch.testing.assert_close(emu_resumed[k], emu_straight[k], rtol=1e-5, atol=1e-7, msg=k)
    for k in straight.server.global_state:
        torch.testing.assert_close(
            resumed.server.global_state[k], straight.server.global_state[k], rtol=1e-5, atol=1e-7, msg=k
        )
    assert r_hook.received == s_hook.received and r_hook.client_versions == s_hook.client_versions


def test_l2_term_is_validated():
    with pytest.raises(
        ValueError, match=r"federation.hooks\[\].l2_term must be one of \('sum', 'mean', 'rms', 'off'\)"
    ):
        EmulatorAlignment(l2_term="max")
