"""PDPOModule: state partition, reference, loss, alternating steps, resume, and that it learns
per-client preferences that FedAvg+DPO cannot."""

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.datamodules.tokenize import PadCollator, tokenize_preference
from lightning_fed.federation import RoundHook
from lightning_fed.modules import BackboneConfig, DPOModule
from lightning_fed.modules.bottleneck import BottleneckAdapter
from lightning_fed.modules.losses import dpo_loss
from lightning_fed.modules.pdpo import PDPOModule
from lightning_fed.state import state_nbytes
from tests.callbacks.test_federated_loop import assert_states_close
from tests.helpers.personal import tiny, tiny_kwargs
from tests.helpers.runs import fit, preference_data, tiny_dpo, tiny_llama

PERSONAL = ("lm_head.", "bottleneck.", "reward_head.", "reward_scale.")


@pytest.fixture
def batch():
    tok = tiny(PDPOModule).tokenizer
    items = [
        tokenize_preference("Rate it.\n", "Truly great.", "Truly awful.", tok, 64, "error"),
        tokenize_preference("A longer prompt here.\n", "Fine, cheers!!", "Fine, regards.", tok, 64, "error"),
    ]
    return PadCollator(tok.pad_token_id)(items)


def perturb(module, std=0.3):
    with torch.no_grad():
        for p in module.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * std)


def test_state_partition_and_personal_head_init():
    m = tiny(PDPOModule)
    shared, personal = m.shared_parameters(), m.personal_parameters()
    assert shared and all(".lora_" in k for k in shared)  # only LoRA travels
    assert personal and all(k.startswith(PERSONAL) for k in personal)
    assert {k.split(".")[0] for k in personal} == {"lm_head", "bottleneck", "reward_head", "reward_scale"}
    assert not any(p.requires_grad for k, p in personal.items() if k.startswith("reward_scale."))
    base_head = m.model.get_base_model().get_output_embeddings().weight
    assert (
        torch.equal(m.lm_head.weight, base_head) and m.lm_head.weight.data_ptr() != base_head.data_ptr()
    )  # a copy, untied
    no_extras = tiny(PDPOModule, use_bottleneck=False, use_reward_head=False)
    assert {k.split(".")[0] for k in no_extras.personal_parameters()} == {"lm_head"}


def test_reference_is_the_backbone_alone(batch):
    m = tiny(PDPOModule)
    perturb(m)  # LoRA, head, bottleneck and reward head all moved
    ref_chosen, ref_rejected = m.reference_log_probs(batch)
    plain = tiny_dpo()  # the same backbone (same seed), adapters at their zero start
    with torch.no_grad():
        base_chosen, base_rejected = DPOModule.sequence_log_probs(plain, batch)
    torch.testing.assert_close(ref_chosen, base_chosen)
    torch.testing.assert_close(ref_rejected, base_rejected)
    chosen, _ = m.sequence_log_probs(batch)
    assert not torch.allclose(chosen, ref_chosen)


def test_loss_is_eq8_on_the_combined_margin(batch):
    m = tiny(PDPOModule).eval()
    perturb(m)
    with torch.no_grad():
        m.reward_scale.value.fill_(3.0)
        metrics = m.pdpo_metrics(batch)
        logps, z, inputs = m.policy_forward(batch)
        chosen, rejected = logps.chunk(2)
        ref_chosen, ref_rejected = m.reference_log_probs(batch)
        r_w, r_l = m.reward_head(z, inputs["attention_mask"].bool()).chunk(2)
    delta = (chosen - ref_chosen) - (rejected - ref_rejected) + 0.5 * 3.0 * (r_w - r_l)  # w_r = 0.5 outside a run
    torch.testing.assert_close(metrics["loss"], -F.logsigmoid(0.5 * delta))
    assert metrics["pref_acc"].tolist() == (chosen > rejected).float().tolist()
    assert m.reward_scale.count.item() == 0  # evaluation never moves the EMA


def test_without_reward_head_it_is_dpo_through_the_personal_head(batch):
    m = tiny(PDPOModule, use_reward_head=False)
    perturb(m)
    with torch.no_grad():
        metrics = m.pdpo_metrics(batch)
        expected, _, _ = dpo_loss(*m.sequence_log_probs(batch), *m.reference_log_probs(batch), beta=0.5)
    torch.testing.assert_close(metrics["loss"], expected)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"lr_h": 0.0}, "model.lr_h must be > 0, got 0.0"),
        ({"reward_pool": "max"}, "model.reward_pool must be one of ('sequence', 'response'), got 'max'"),
        ({"rounds": 0}, "model.rounds must be >= 1, got 0"),
        ({"bottleneck_dim": 0}, "model.bottleneck_dim must be >= 1, got 0"),
        (
            {"lr_decay": 1.5, "min_lr": -1.0},
            "model.lr_decay must be in (0, 1) or null, got 1.5; model.min_lr must be >= 0, got -1.0",
        ),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tiny(PDPOModule, **kwargs)


class RecordingPDPO(PDPOModule):
    """Records which kind of parameter is trainable at every optimizer step, and the batches."""

    def training_step(self, batch, batch_idx):
        self.batches = getattr(self, "batches", 0) + 1
        return super().training_step(batch, batch_idx)

    def accumulate(self, optimizer, loss, window, step):
        if step:
            kinds = {
                "personal" if self.is_personal(n) else "shared" for n, p in self.named_parameters() if p.requires_grad
            }
            self.steps_seen = [*getattr(self, "steps_seen", []), kinds]
        super().accumulate(optimizer, loss, window, step)


def test_alternating_steps_and_only_lora_is_uploaded(tmp_path):
    m = tiny(RecordingPDPO)
    loop = FederatedLoop(rounds=1, clients_per_round=2, local_steps=2, seed=0)
    fit(m, preference_data(groups=("positive", "negative")), loop, str(tmp_path))
    assert m.steps_seen == [{"personal"}, {"shared"}] * 4  # Algorithm 1: personal step, then LoRA step
    assert loop.server.global_state and all(".lora_" in k for k in loop.server.global_state)
    assert loop.server.report.history[0]["up_bytes"] == 2 * state_nbytes(loop.server.global_state)
    clients = loop.server.report.history[0]["clients"]
    states = [loop.store.get(c)["personal"] for c in clients]
    assert all(set(s) == set(m.personal_parameters()) for s in states)
    assert all(s["reward_scale.count"].item() == 2 for s in states)  # one EMA update per local batch
    assert not torch.equal(states[0]["lm_head.weight"], states[1]["lm_head.weight"])


class CountRounds(RoundHook):
    def __init__(self):
        self.rounds = []

    def on_client_start(self, turn, trainer, module, client_id):
        self.rounds.append(trainer.current_epoch)


def run(tmp_path, name, loop_rounds, ckpt_path=None):
    loop = FederatedLoop(
        rounds=loop_rounds,
        clients_per_round=2,
        local_steps=2,
        seed=0,
        hooks=[CountRounds()],
        eval_clients="panel",
        eval_panel_size=2,
    )
    # the w_r schedule spans the full 3 rounds in every run; App. D.3's lr decay is personal state too
    module = tiny(PDPOModule, rounds=3, lr_decay=0.5)
    data = preference_data(groups=("positive", "negative"))
    fit(module, data, loop, str(tmp_path / name), ckpt_path=ckpt_path)
    return loop, module


def test_resume_equals_uninterrupted(tmp_path):
    straight, m_straight = run(tmp_path, "straight", 3)
    first, _ = run(tmp_path, "first", 2)
    resumed, m_resumed = run(tmp_path, "resumed", 3, ckpt_path=str(tmp_path / "first" / "ckpt" / "last.ckpt"))
    assert resumed.server.hooks[0].rounds == [2, 2]  # only the last round's 2 clients trained after the resume
    with pytest.raises(AssertionError):  # not trivial: 2 rounds differ from 3
        assert_states_close(first.server.global_state, straight.server.global_state)
    assert_states_close(resumed.server.global_state, straight.server.global_state)
    expected = straight.store.state_dict()
    assert set(resumed.store.state_dict()) == set(expected)
    for cid, entry in expected.items():  # personal heads, bottlenecks, reward heads, EMA scales, lr decay
        assert_states_close(resumed.store.get(cid)["personal"], entry["personal"])
        assert {"lr_decay.scale", "lr_decay.last_loss", "lr_decay.round"} <= set(entry["personal"])
    assert m_resumed.current_reward_weight() == m_straight.current_reward_weight() == 1.5
    assert [r["val"]["pref_acc"] for r in resumed.server.report.history] == pytest.approx(
        [r["val"]["pref_acc"] for r in straight.server.report.history]
    )


def test_beats_fedavg_dpo_when_clients_prefer_opposite_things(tmp_path):
    """The paper's claim on planted non-IID data: groups prefer opposite sentiment."""
    results = {}
    for name, module in (("fedavg_dpo", tiny_dpo()), ("fedpdpo", tiny(PDPOModule))):
        loop = FederatedLoop(rounds=2, clients_per_round=4, local_steps=3, seed=0)
        fit(module, preference_data(groups=("positive", "negative")), loop, str(tmp_path / name))
        results[name] = loop.server.report.history[-1]["val"]
    pdpo, dpo = results["fedpdpo"], results["fedavg_dpo"]
    assert pdpo["pref_acc_client_mean"] >= dpo["pref_acc_client_mean"] + 0.25, (pdpo, dpo)
    assert pdpo["pref_acc_client_min"] >= 0.8 > dpo["pref_acc_client_min"], (pdpo, dpo)


def test_exclusion_mask_by_hand():
    from lightning_fed.modules.pdpo_loss import exclusion_mask

    # losses [1] * 7 + [9]: mean 2, population var (7 * 1 + 49) / 8 = 7, std 2.6458
    # threshold 2 + 2 * 2.6458 = 7.29: the 9 is left out (1 of 8 <= cap floor(0.5 * 8) = 4)
    losses = torch.tensor([1.0] * 7 + [9.0])
    assert exclusion_mask(losses, k=2.0).tolist() == [True] * 7 + [False]
    # losses [4, 3, 2, 1], k = 0: above the mean 2.5 are 4 and 3; cap floor(0.25 * 4) = 1 keeps only 4 out
    assert exclusion_mask(torch.tensor([4.0, 3.0, 2.0, 1.0]), k=0.0, max_ratio=0.25).tolist() == [
        False,
        True,
        True,
        True,
    ]
    assert exclusion_mask(torch.tensor([4.0, 3.0, 2.0, 1.0]), k=0.0, max_ratio=0.5).tolist() == [
        False,
        False,
        True,
        True,
    ]
    assert exclusion_mask(torch.tensor([5.0, 5.0, 5.0]), k=2.0).all()  # std 0: nothing is above the mean
    m = tiny(PDPOModule, exclusion_k=2.0)
    assert m.objective(losses).item() == pytest.approx(1.0)  # the mean of the 7 kept pairs
    assert tiny(PDPOModule).objective(losses).item() == pytest.approx(2.0)  # off by default: the plain mean


def test_phased_schedule_splits_the_turn_by_hand():
    m = tiny(PDPOModule, local_schedule="phased", personal_epochs=1, lora_epochs=3)
    # 8 batches, no accumulation: 8 windows, round(8 * 1/4) = 2 personal windows, then 6 LoRA
    assert [m.local_phases(i, 8) for i in range(8)] == [(True, False)] * 2 + [(False, True)] * 6
    m.accumulate_grad_batches = 2  # 8 batches = 4 windows of 2: round(4 / 4) = 1 personal window
    assert [m.local_phases(i, 8) for i in range(8)] == [(True, False)] * 2 + [(False, True)] * 6
    m.accumulate_grad_batches = 1  # 2 batches, 1:3: round(2 / 4) = 0 -> raised to 1: one of each
    assert [m.local_phases(i, 2) for i in range(2)] == [(True, False), (False, True)]
    assert tiny(PDPOModule).local_phases(5, 8) == (True, True)  # alternate: both on every batch


@pytest.mark.parametrize(
    ("kwargs", "local_steps", "batches", "steps"),
    [
        # K = 2 steps x 2 accumulated batches = 4 batches; a personal and a LoRA step per window
        ({"accumulate_grad_batches": 2}, 2, 4, [{"personal"}, {"shared"}] * 2),
        # phased 1 : 3 over K = 4 steps: 1 personal step, then 3 LoRA steps (Algorithm 1 as blocks)
        ({"local_schedule": "phased", "personal_epochs": 1, "lora_epochs": 3}, 4, 4, [{"personal"}] + [{"shared"}] * 3),
    ],
)
def test_accumulation_and_phased_schedule_inside_a_turn(tmp_path, kwargs, local_steps, batches, steps):
    m = tiny(RecordingPDPO, **kwargs)
    loop = FederatedLoop(rounds=1, clients_per_round=2, local_steps=local_steps, seed=0)
    fit(m, preference_data(groups=("positive", "negative")), loop, str(tmp_path))
    assert [t.num_batches for t in loop.plans] == [batches, batches]  # the loop reads the module's accumulation
    assert m.batches == 2 * batches
    assert m.steps_seen == steps * 2  # per client, and nothing carried from one client to the next
    assert loop.last_turn.steps == len(steps)  # the loop's per-client optimizer step count


def test_local_epochs_turns_are_whole_accumulation_windows(tmp_path):
    """local_epochs: ceil(n / b) batches per epoch, rounded up to whole windows of 2."""
    m = tiny(RecordingPDPO, accumulate_grad_batches=2)
    loop = FederatedLoop(rounds=1, clients_per_round=1, local_steps=None, local_epochs=1, seed=0)
    data = preference_data(groups=("positive", "negative"))
    fit(m, data, loop, str(tmp_path))
    sizes, b = loop.datamodule.client_sizes, loop.datamodule.batch_size
    for turn in loop.plans:
        per_epoch = -(-sizes[turn.client_id] // b)
        assert turn.num_batches == 2 * -(-per_epoch // 2) and turn.num_batches % 2 == 0


def test_schedule_and_exclusion_settings_are_validated():
    with pytest.raises(
        ValueError,
        match=r"model.local_schedule must be one of \('alternate', 'phased'\), got 'epochs'.*"
        r"model.accumulate_grad_batches must be an integer >= 1, got 0.*model.exclusion_k must be >= 0",
    ):
        tiny(PDPOModule, local_schedule="epochs", accumulate_grad_batches=0, exclusion_k=-1.0)


TINY_LLAMA = tiny_llama(max_position_embeddings=256)


@pytest.mark.parametrize("config", [None, TINY_LLAMA], ids=["gpt2-layernorm", "llama-rmsnorm"])
def test_personal_model_at_init_is_the_base_model(batch, config):
    """Eq. (9) over the pre-norm residual stream with a copy of the backbone's final norm and a zero
    Decode: the personal path's logits at init are the base model's (the old LayerNorm on top of the
    normalised output was not: about temperature 2 on SmolLM2)."""
    if config is None:
        m = tiny(PDPOModule).eval()
    else:
        pl.seed_everything(0, verbose=False)
        kwargs = {**tiny_kwargs(), "backbone": BackboneConfig(config=dict(config), tokenizer="bytes")}
        m = PDPOModule(**kwargs, bottleneck_dim=16, reward_hidden=32).eval()
    base = m.model.get_base_model()
    body = getattr(base, base.base_model_prefix)
    backbone_norm = getattr(body, m.bottleneck.norm_name)
    with torch.no_grad():  # a non-trivial gain (and bias), so that copying it is what makes the identity
        for p in backbone_norm.parameters():
            p.copy_(torch.rand_like(p) + 0.5)
    m.bottleneck = BottleneckAdapter(32, 16, 0.0, body=body)
    copied = dict(m.bottleneck.norm.named_parameters())
    for name, p in backbone_norm.named_parameters():
        assert torch.equal(copied[name], p) and copied[name].data_ptr() != p.data_ptr()
        assert copied[name].requires_grad and not p.requires_grad  # personal copy trains, backbone stays frozen
    ids, mask = batch["chosen_input_ids"], batch["chosen_attention_mask"]
    with torch.no_grad():
        personal = m.lm_head(m.features(ids, mask))
        with m.model.disable_adapter():
            reference = m.model(input_ids=ids, attention_mask=mask).logits
        plain = body(input_ids=ids, attention_mask=mask).last_hidden_state  # the hook is gone after features()
    torch.testing.assert_close(personal, reference, atol=1e-6, rtol=0)
    torch.testing.assert_close(m.bottleneck(plain), m.bottleneck.norm(plain))  # Decode = 0 at init
    assert not torch.allclose(plain, backbone_norm(plain))  # ... and the body applies its own norm again


class GradientRecordingPDPO(PDPOModule):
    """Records every gradient each optimizer steps on, and how often the backbone runs for the policy."""

    def configure_optimizers(self):
        optimizers = super().configure_optimizers()
        for opt in optimizers:
            opt.register_step_pre_hook(self.record)
        return optimizers

    def record(self, optimizer, args, kwargs):
        grads = [p.grad.clone() for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        self.grads = [*getattr(self, "grads", []), grads]

    def backbone_features(self, input_ids, attention_mask):
        self.backbone_runs = getattr(self, "backbone_runs", 0) + 1
        return super().backbone_features(input_ids, attention_mask)


def test_lora_step_reuses_the_backbone_forward_with_unchanged_gradients(tmp_path):
    """Issue 23: the LoRA step reads the personal step's ``z'`` (one backbone forward per batch, not two) and
    every personal and LoRA gradient equals the recomputing path's; with dropout in the personal modules, so
    that the random draws must line up too."""
    runs = {}
    for reuse in (True, False):
        m = tiny(GradientRecordingPDPO, reuse_backbone_forward=reuse, bottleneck_dropout=0.1, reward_dropout=0.1)
        loop = FederatedLoop(rounds=2, clients_per_round=2, local_steps=2, seed=0)
        fit(m, preference_data(groups=("positive", "negative")), loop, str(tmp_path / str(reuse)))
        runs[reuse] = m, loop
    (reused, reused_loop), (recomputed, recomputed_loop) = runs[True], runs[False]
    steps = 2 * 2 * 2 * 2  # rounds x clients x batches x (personal, LoRA)
    assert len(reused.grads) == len(recomputed.grads) == steps
    for a, b in zip(reused.grads, recomputed.grads):
        assert len(a) == len(b) and a
        for ga, gb in zip(a, b):
            torch.testing.assert_close(ga, gb, rtol=1e-6, atol=1e-9)
    assert not torch.equal(reused.grads[0][0], reused.grads[2][0])  # not trivial: the steps move
    assert_states_close(reused_loop.server.global_state, recomputed_loop.server.global_state)
    assert recomputed.backbone_runs - reused.backbone_runs == steps // 2  # one backbone forward saved per batch
