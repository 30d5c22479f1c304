"""Personal parameters stacked per client (issue 43): FedPer's upper LoRA blocks and personal LM head.

FedPer trains in groups: its personal LoRA factors are stacked with the shared ones, its personal
head (an untied ``nn.Linear`` of the vocabulary's size) is stacked over the group's clients and each
row is read through its own client's head (:mod:`lightning_fed.batching.personal_rows`). With SGD
each client's upload and personal state equal its sequential turn's to float32 rounding
(:data:`~tests.batching.relative_rounding.RTOL`); with AdamW within ``test_parity.py``'s tolerance,
derived there from a sequential run whose tensor shapes alone changed. FedRep (head steps, then body
steps, with its own manual optimizer steps) trains in groups the same way.
"""

from __future__ import annotations

import pytest
import torch

from lightning_fed.batching.fallback import batching_fallback
from lightning_fed.callbacks import FederatedLoop
from lightning_fed.federation import RoundHook
from lightning_fed.federation.hooks import Capability
from lightning_fed.modules import BackboneConfig, LoraSettings
from lightning_fed.modules.fedper import FedPerModule
from lightning_fed.modules.fedrep import FedRepModule
from tests.batching.relative_rounding import RTOL, assert_relatively_equal
from tests.batching.test_parity import LR, NO_DROPOUT, RecordUpdates, assert_same_uploads
from tests.helpers.runs import fit, preference_data


class RecordPersonal(RoundHook):
    """Each client's personal state as its turn stores it (batch-safe: the turn's own slot)."""

    capabilities = frozenset({Capability.BATCH_SAFE})

    def __init__(self) -> None:
        self.personal: dict[tuple[int, int], dict] = {}

    def on_client_end(self, turn, trainer, module, update) -> None:
        state = module.personal_parameters()
        self.personal[(turn.round_idx, update.client_id)] = {k: v.detach().clone() for k, v in state.items()}


#: SGD's learning rate: large enough that 2 rounds of 3 steps move every tensor well past rounding.
SGD_LR = 0.05


def fedper_module(optimizer: str, lr: float) -> FedPerModule:
    return FedPerModule(
        BackboneConfig(config=dict(NO_DROPOUT), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        shared_layers=1,
        lr=lr,
        optimizer=optimizer,
        beta=0.5,
    )


def personal_round(tmp_path, name, make_module, batch_clients, seed=0, rounds=2, **trainer_kwargs):
    torch.manual_seed(seed)
    module = make_module()
    uploads, personal = RecordUpdates(), RecordPersonal()
    loop = FederatedLoop(
        rounds=rounds,
        clients_per_round=4,
        local_steps=3,
        seed=seed,
        hooks=[uploads, personal],
        batch_clients=batch_clients,
        eval_every=rounds,
        save_adapter=False,
    )
    data = preference_data(num_clients=4, per_client=12, batch_size=2, max_length=160)
    fit(module, data, loop, str(tmp_path / name), limit_val_batches=0, **trainer_kwargs)
    return uploads.updates, personal.personal, loop


def fedrep_module(optimizer: str = "sgd", lr: float = SGD_LR) -> FedRepModule:
    """One head step, then two body steps (``local_steps`` 3), at two learning rates."""
    return FedRepModule(
        BackboneConfig(config=dict(NO_DROPOUT), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0),
        head_steps=1,
        lr=lr,
        lr_head=2 * lr,
        optimizer=optimizer,
        beta=0.5,
        gradient_clip_val=0.05,
    )


def test_fedper_and_fedrep_batch():
    assert batching_fallback(fedper_module("sgd", SGD_LR), []) is None
    assert batching_fallback(fedrep_module(), []) is None


def test_fedrep_head_then_body_steps_match(tmp_path):
    """FedRep's manual steps in a group: every client in the head phase, then in the body phase;
    each step's loss per client and its clip (``gradient_clip_val`` 0.05: every step clips) per client."""
    seq_up, seq_own, loop_seq = personal_round(tmp_path, "seq", fedrep_module, "off")
    bat_up, bat_own, loop_bat = personal_round(tmp_path, "bat", fedrep_module, 4)
    assert loop_seq.group_size == 1 and loop_bat.group_size == 4
    assert_relatively_equal(seq_up, bat_up, RTOL)
    assert_relatively_equal(seq_own, bat_own, RTOL)


def test_fedper_with_sgd_uploads_and_personal_states_match(tmp_path):
    """Two rounds: round 2 starts each client from the personal state its round-1 turn stored."""
    seq_up, seq_own, loop_seq = personal_round(tmp_path, "seq", lambda: fedper_module("sgd", SGD_LR), "off")
    bat_up, bat_own, loop_bat = personal_round(tmp_path, "bat", lambda: fedper_module("sgd", SGD_LR), 4)
    assert loop_seq.group_size == 1 and loop_bat.group_size == 4
    assert any(k.startswith("lm_head") for k in seq_own[(0, 0)])
    moved = (seq_own[(1, 0)]["lm_head.weight"] - fedper_module("sgd", SGD_LR).lm_head.weight).abs().max()
    assert moved > 1e-4  # the heads trained: the comparison is of something
    assert_relatively_equal(seq_up, bat_up, RTOL)
    assert_relatively_equal(seq_own, bat_own, RTOL)


def test_gradient_clipping_covers_the_personal_head_per_client(tmp_path):
    """FedPer's config clips at 1.0: each client's norm counts its head's gradient, as sequentially."""
    make = lambda: fedper_module("sgd", SGD_LR)  # noqa: E731
    seq_up, seq_own, _ = personal_round(tmp_path, "seq", make, "off", rounds=1, gradient_clip_val=0.01)
    bat_up, bat_own, _ = personal_round(tmp_path, "bat", make, 4, rounds=1, gradient_clip_val=0.01)
    assert_relatively_equal(seq_up, bat_up, RTOL)
    assert_relatively_equal(seq_own, bat_own, RTOL)


def test_fedper_with_adamw_stays_within_the_parity_tolerance(tmp_path):
    """AdamW divides each gradient by its own running scale, which amplifies rounding on near-zero
    components: held to ``test_parity.py``'s ``0.1 * lr`` (5x the spread that a sequential run whose
    tensor shapes alone changed shows, benchmarks/batched_rounding.py)."""
    seq_up, seq_own, _ = personal_round(tmp_path, "seq", lambda: fedper_module("adamw", LR), "off", rounds=1)
    bat_up, bat_own, _ = personal_round(tmp_path, "bat", lambda: fedper_module("adamw", LR), 4, rounds=1)
    assert_same_uploads(seq_up, bat_up)
    assert_same_uploads(seq_own, bat_own)


def test_a_row_read_through_another_clients_head_is_caught(tmp_path, monkeypatch):
    """The comparison can fail: every row through slot 0's head (a stacking that ignores the rows)."""
    import torch.nn.functional as F

    import lightning_fed.batching.personal_rows as personal_rows

    def slot_zero(layer, rows, x, keep=None):
        return F.linear(x, layer.weight[0], None if layer.bias is None else layer.bias[0])

    make = lambda: fedper_module("sgd", SGD_LR)  # noqa: E731
    seq_up, seq_own, _ = personal_round(tmp_path, "seq", make, "off", rounds=1)
    monkeypatch.setattr(personal_rows, "stacked_linear_forward", slot_zero)
    bad_up, bad_own, _ = personal_round(tmp_path, "bad", make, 4, rounds=1)
    with pytest.raises(AssertionError, match="differs by"):
        assert_relatively_equal(seq_own, bad_own, RTOL)
