"""Batched client turns (``federation.batch_clients``) upload what sequential turns upload.

Each test runs the same round twice, same seed and same batches: once one client after another,
once with the clients trained together, and compares every client's uploaded state and extras.
The tolerance is float32 rounding: the batched forward multiplies the LoRA factors in another
order (a gathered batched matmul) and pads each step to the widest of the group's batches, which
moves the logits by about 1e-7; AdamW divides each gradient by its own running norm, so on a
near-zero gradient component that rounding can move the update by a visible fraction of ``lr``
(two sequential runs that differ only in tensor shapes differ as much: benchmarks/batched_rounding.py).
Measured largest difference of an uploaded value: 1.4e-6 (FedIT), 2.7e-5 and 6.8e-6 (FedBiscuit's
third round, two sessions), against a largest LoRA value of 0.015 (3 steps of lr 5e-3), and 9.7e-5
for FedBiscuit on another machine of two busy cores (issue 41). What moves it is the CPU's kernels
(ATen's vectorized ones, MKL's), not the load or the thread count: ``benchmarks/float_paths.py``
runs the comparison with AVX512, AVX2 and plain kernels and 1 or 2 threads (benchmarks/RESULTS.md,
"Float paths"). The tolerance is 10% of one AdamW step's largest move, ``0.1 * lr = 5e-4``: five
times the largest spread seen anywhere; a deliberately broken reduction (one mean over all rows
instead of per client) is off by 7e-3, 14 times the tolerance (``test_a_mean_over_all_rows_is_caught``).
"""

from __future__ import annotations

import pytest
import torch

import lightning_fed.modules.sft as sft
from lightning_fed.batching.client_rows import per_client_loss
from lightning_fed.callbacks import FederatedLoop
from lightning_fed.datamodules import InstructionDataModule
from lightning_fed.federation import RoundHook
from lightning_fed.federation.hooks import Capability
from lightning_fed.modules import BackboneConfig, BinarySelectorModule, DPOModule, LoraSettings, SFTModule
from lightning_fed.round_hooks.client_grouping import ClientGrouping
from lightning_fed.strategies import FedBiscuit, FedProx, HetLoRA, Scaffold
from tests.helpers.runs import TINY_GPT2, fit, preference_data, tiny_llama
from tests.helpers.selector_data import one_thread, write_planted_selector_data

#: A tiny GPT-2 without dropout (batched turns fall back under active dropout).
NO_DROPOUT = {**TINY_GPT2, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "initializer_range": 0.1}
STEPS, LR = 3, 5e-3  # local steps and learning rate of every run here
ATOL = 0.1 * LR  # module docstring: 5x the largest spread across CPU kernels and machines


class RecordUpdates(RoundHook):
    """Every upload's state and extras, by client (batch-safe: it reads only the update)."""

    capabilities = frozenset({Capability.BATCH_SAFE})

    def __init__(self) -> None:
        self.updates: dict[tuple[int, int], dict] = {}

    def on_client_end(self, turn, trainer, module, update) -> None:
        state = {**update.state, **{f"extra/{k}": v for k, v in update.extras.items()}}
        self.updates[(turn.round_idx, update.client_id)] = {k: v.detach().clone() for k, v in state.items()}
        self.updates[(turn.round_idx, update.client_id)]["loss"] = torch.tensor(update.metrics["train_loss"])


#: A tiny Llama (rotary positions, grouped-query attention, gated MLP: SmolLM2's architecture).
TINY_LLAMA = tiny_llama(initializer_range=0.1)


def sft_module(r: int = 4, config: dict | None = None, optimizer: str = "adamw", lr: float = LR) -> SFTModule:
    return SFTModule(
        BackboneConfig(config=dict(config or NO_DROPOUT), tokenizer="bytes"),
        lora=LoraSettings(r=r, alpha=2 * r, dropout=0.0),
        lr=lr,
        optimizer=optimizer,
    )


def sft_data(num_clients: int = 4, batch_size: int = 3) -> InstructionDataModule:
    args = {"num_clients": num_clients, "examples_per_client": 10, "families": ["uppercase", "reverse_words"]}
    return InstructionDataModule(
        num_clients=num_clients,
        synthetic_args=args,
        template="plain",
        batch_size=batch_size,
        max_length=160,
        val_fraction=0.2,
    )


def dpo_module(cache_reference: bool = True) -> DPOModule:
    return DPOModule(
        BackboneConfig(config=dict(NO_DROPOUT), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        lr=LR,
        beta=0.5,
        cache_reference=cache_reference,
    )


def run_round(tmp_path, name, make_module, make_data, batch_clients, rounds=1, extra_hooks=(), **loop_kwargs):
    torch.manual_seed(0)
    module = make_module()
    recorder = RecordUpdates()
    loop_kwargs.setdefault("clients_per_round", 4)
    loop = FederatedLoop(
        rounds=rounds,
        local_steps=STEPS,
        seed=0,
        hooks=[recorder, *extra_hooks],
        batch_clients=batch_clients,
        eval_every=rounds,
        save_adapter=False,
        **loop_kwargs,
    )
    fit(module, make_data(), loop, str(tmp_path / name), limit_val_batches=0)
    return recorder.updates, loop


def assert_same_uploads(a, b, atol=ATOL):
    assert a.keys() == b.keys() and a
    for key in a:
        assert a[key].keys() == b[key].keys()
        for name in a[key]:
            # SCAFFOLD's control delta is (x - y) / (steps * lr): the states' rounding, scaled by 1 / (steps * lr).
            tol = atol / (STEPS * LR) if name.startswith("extra/control") else atol
            diff = (a[key][name] - b[key][name]).abs().max().item()
            assert diff <= tol, f"round {key[0]} client {key[1]} {name}: differs by {diff}"


@pytest.mark.parametrize("config", [NO_DROPOUT, TINY_LLAMA], ids=["gpt2", "llama"])
def test_fedit_sft_uploads_match(tmp_path, config):
    seq, loop_seq = run_round(tmp_path, "seq", lambda: sft_module(config=config), sft_data, "off")
    bat, loop_bat = run_round(tmp_path, "bat", lambda: sft_module(config=config), sft_data, 4)
    assert loop_seq.group_size == 1 and loop_bat.group_size == 4
    assert_same_uploads(seq, bat)


def test_with_sgd_the_uploads_agree_to_float32_rounding(tmp_path):
    """Without AdamW's division by each element's own gradient scale, nothing amplifies the
    rounding: measured largest difference 2.4e-8 against LoRA values up to 0.07 (SmolLM2-135M DPO,
    by hand: 4e-8 against 6e-3); the tolerance is 1e-6."""
    seq, _ = run_round(tmp_path, "seq", lambda: sft_module(optimizer="sgd", lr=0.5), sft_data, "off")
    bat, _ = run_round(tmp_path, "bat", lambda: sft_module(optimizer="sgd", lr=0.5), sft_data, 4)
    assert_same_uploads(seq, bat, atol=1e-6)


def test_a_mean_over_all_rows_is_caught(tmp_path, monkeypatch):
    """The comparison can fail: one token mean over the whole group's rows (not per client)."""

    def one_mean(values, client_ids, mask):
        out = per_client_loss(values, client_ids, mask)
        out["loss"] = values[mask].mean()  # one mean over every client's tokens
        return out

    seq, _ = run_round(tmp_path, "seq", sft_module, sft_data, "off")
    monkeypatch.setattr(sft, "per_client_loss", one_mean)
    bad, _ = run_round(tmp_path, "bad", sft_module, sft_data, 4)
    with pytest.raises(AssertionError, match="differs by"):
        assert_same_uploads(seq, bad)


@pytest.mark.parametrize("cache_reference", [True, False])
def test_feddpo_uploads_match(tmp_path, cache_reference):
    """With the reference cache (each example's reference computed alone, adapters disabled, inside
    the batched step) and without it (the reference forward over the whole group's rows)."""

    def data():
        return preference_data(num_clients=4, per_client=12, batch_size=2, max_length=160)

    seq, _ = run_round(tmp_path, "seq", lambda: dpo_module(cache_reference), data, "off")
    bat, loop = run_round(tmp_path, "bat", lambda: dpo_module(cache_reference), data, 4)
    assert loop.group_size == 4
    assert_same_uploads(seq, bat)


def test_fedprox_proximal_term_per_client(tmp_path):
    """Groups of 2 (two groups in the round); the proximal pull is strong enough to matter."""
    seq, _ = run_round(tmp_path, "seq", sft_module, sft_data, "off", strategy=FedProx(mu=1.0))
    bat, _ = run_round(tmp_path, "bat", sft_module, sft_data, 2, strategy=FedProx(mu=1.0))
    assert_same_uploads(seq, bat)


@pytest.mark.parametrize("correction", ["gradient", "parameter"])
def test_scaffold_corrections_and_two_rounds_reach_the_same_global_state(tmp_path, correction):
    """Two rounds: round 2's corrections ``c - c_i`` are non-zero; the uploaded control deltas
    (extras) and the final global state agree."""
    runs = {}
    for name, k in (("seq", "off"), ("bat", "auto")):
        runs[name] = run_round(
            tmp_path, name, sft_module, sft_data, k, rounds=2, strategy=Scaffold(correction=correction)
        )
    (seq, loop_seq), (bat, loop_bat) = runs["seq"], runs["bat"]
    assert loop_bat.group_size > 1
    assert any(k.startswith("extra/control") for k in seq[(1, 0)])
    assert_same_uploads(seq, bat)
    for name, value in loop_seq.server.global_state.items():
        assert (value - loop_bat.server.global_state[name]).abs().max().item() <= ATOL, name


def test_gradient_clipping_is_per_client(tmp_path):
    """``gradient_clip_val`` clips each client's gradient by its own norm, as its sequential turn does."""
    seq, _ = run_round_clipped(tmp_path, "seq", "off")
    bat, _ = run_round_clipped(tmp_path, "bat", 4)
    assert_same_uploads(seq, bat)


def run_round_clipped(tmp_path, name, batch_clients):
    torch.manual_seed(0)
    module, recorder = sft_module(), RecordUpdates()
    loop = FederatedLoop(
        rounds=1,
        clients_per_round=4,
        local_steps=STEPS,
        seed=0,
        hooks=[recorder],
        batch_clients=batch_clients,
        save_adapter=False,
        strategy=Scaffold(),
    )
    # A bound below every client's gradient norm (measured ~0.1-1 at these steps): every step clips.
    fit(module, sft_data(), loop, str(tmp_path / name), limit_val_batches=0, gradient_clip_val=0.01)
    return recorder.updates, loop


def selector_module() -> BinarySelectorModule:
    return BinarySelectorModule(
        BackboneConfig(config=dict(NO_DROPOUT), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        lr=LR,
        num_selectors=3,
    )


def test_fedbiscuit_selector_training_uploads_match(tmp_path):
    """Warm-up rounds train one selector each; round 4 groups the clients, so one batched step
    trains three selectors (each client its own cluster's adapter)."""
    from lightning_fed.datamodules import SelectorDataModule

    path = write_planted_selector_data(tmp_path / "d.jsonl", 6, 12, groups=("positive", "negative", "formal"))

    def data():
        return SelectorDataModule(
            dataset=path, num_clients=6, template="short", max_length=160, batch_size=2, val_fraction=0.25
        )

    def strategy():
        return FedBiscuit(num_selectors=3, warmup_rounds=1, regroup_every=1)

    with one_thread():
        seq, _ = run_round(
            tmp_path,
            "seq",
            selector_module,
            data,
            "off",
            rounds=4,
            clients_per_round=6,
            strategy=strategy(),
            extra_hooks=[ClientGrouping()],
        )
        bat, loop = run_round(
            tmp_path,
            "bat",
            selector_module,
            data,
            6,
            rounds=4,
            clients_per_round=6,
            strategy=strategy(),
            extra_hooks=[ClientGrouping()],
        )
    assert loop.group_size == 6
    assert len({loop.server.strategy.selector_of(c) for c in range(6)}) > 1  # the last round mixed selectors
    assert_same_uploads(seq, bat)


def test_hetlora_ranks_and_rank_penalty_per_client(tmp_path):
    """Clients of ranks 1, 2 and 4 in one group (each zero-padded to the module's rank, cut back on
    upload), HetLoRA's rank penalty on each client's own slot, two rounds (self-pruning decided)."""

    def data():
        return preference_data(num_clients=4, per_client=12, batch_size=2, max_length=160)

    def strategy():
        return HetLoRA(client_ranks=[1, 2, 4, 4], prune_gamma=0.5, rank_penalty=0.1)

    seq, _ = run_round(tmp_path, "seq", dpo_module, data, "off", rounds=2, strategy=strategy())
    bat, loop = run_round(tmp_path, "bat", dpo_module, data, 4, rounds=2, strategy=strategy())
    assert loop.group_size == 4
    ranks = {
        key: [v.shape for n, v in up.items() if n.endswith("lora_A.default.weight")][0][0] for key, up in seq.items()
    }
    assert sorted(set(ranks.values())) == [1, 2, 4]
    assert_same_uploads(seq, bat)


class LastLosses(RecordUpdates):
    def on_client_end(self, turn, trainer, module, update) -> None:
        self.updates[update.client_id] = turn.losses[-1]


def test_the_logged_training_loss_of_a_batched_step_is_the_clients_mean(tmp_path):
    """``train/loss`` of a batched step is the mean of the clients' own losses (not the summed objective)."""
    module, last = sft_module(), LastLosses()
    loop = FederatedLoop(rounds=1, clients_per_round=4, local_steps=2, seed=0, hooks=[last], batch_clients=4)
    trainer = fit(module, sft_data(), loop, str(tmp_path), limit_val_batches=0)
    assert len(last.updates) == 4
    mean = sum(last.updates.values()) / 4
    assert abs(trainer.callback_metrics["train/loss"].item() - mean) < 1e-5, (trainer.callback_metrics, last.updates)
