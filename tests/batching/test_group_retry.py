"""A step of clients trained together that raises leaves out only the client that fails alone.

One client's rows make the module raise (a bad example, an out-of-memory on its longest row): in a
batched group that one step holds every client's rows, so the group's clients train again one
after another (:mod:`lightning_fed.batching.group_retry`) and the K-1 others upload what their
sequential turns upload. Tolerance: ``test_parity``'s (the retried turns are sequential turns on
their rows of the group's batches, which are padded to the group's widest row: float32 rounding).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import lightning_fed.batching.grouped_driver as grouped_driver
import lightning_fed.modules.sft as sft
from lightning_fed.batching.client_rows import per_client_loss
from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings, SFTModule
from tests.batching.test_parity import LR, NO_DROPOUT, assert_same_uploads, run_round, sft_data, sft_module
from tests.helpers.runs import preference_data

BAD = 2  # the client whose rows make the step raise


class FailsOnOneClient(SFTModule):
    """SFT whose step raises on any batch that holds a row of client ``BAD``."""

    def training_step(self, batch, batch_idx):
        if bool((batch["client_id"] == BAD).any()):
            raise RuntimeError(f"client {BAD}'s rows")
        return super().training_step(batch, batch_idx)


def failing_module() -> FailsOnOneClient:
    return FailsOnOneClient(
        BackboneConfig(config=dict(NO_DROPOUT), tokenizer="bytes"), lora=LoraSettings(r=4, alpha=8, dropout=0.0), lr=LR
    )


def test_one_failing_client_of_a_group_leaves_the_others_updates(tmp_path):
    seq, _ = run_round(tmp_path, "seq", failing_module, sft_data, "off")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bat, loop = run_round(tmp_path, "bat", failing_module, sft_data, 4)
    assert loop.group_size == 4
    assert sorted(cid for _, cid in bat) == [0, 1, 3]  # client BAD alone is left out
    assert_same_uploads(seq, bat)
    assert loop.server.failed == [BAD]
    lines = [str(w.message) for w in caught if "trained together failed" in str(w.message)]
    assert lines == [
        'a step of clients 0, 1, 2, 3 trained together failed in round 1: RuntimeError("client 2\'s rows");'
        " each trains again alone, and only a client that fails alone is left out"
    ]
    assert any(f"client {BAD} failed in round 1 and is left out" in str(w.message) for w in caught)


class DPOFailsOnOneClient(DPOModule):
    """DPO whose step raises on any batch that holds a pair of client ``BAD``."""

    def training_step(self, batch, batch_idx):
        if bool((batch["client_id"] == BAD).any()):
            raise RuntimeError(f"client {BAD}'s pairs")
        return super().training_step(batch, batch_idx)


def test_a_failing_dpo_client_leaves_the_others_updates(tmp_path):
    """The same with preference pairs (the prompt once, packed rows, the reference cache)."""

    def module():
        return DPOFailsOnOneClient(
            BackboneConfig(config=dict(NO_DROPOUT), tokenizer="bytes"),
            lora=LoraSettings(r=4, alpha=8, dropout=0.0),
            lr=LR,
            beta=0.5,
        )

    def data():
        return preference_data(num_clients=4, per_client=12, batch_size=2, max_length=160)

    seq, _ = run_round(tmp_path, "seq", module, data, "off")
    bat, loop = run_round(tmp_path, "bat", module, data, 4)
    assert loop.group_size == 4 and loop.server.failed == [BAD]
    assert sorted(cid for _, cid in bat) == [0, 1, 3]
    assert_same_uploads(seq, bat)


def test_a_retry_on_other_rows_is_caught(tmp_path, monkeypatch):
    """The comparison can fail: client 0 retried on client 3's rows of the group's batches."""
    seq, _ = run_round(tmp_path, "seq", failing_module, sft_data, "off")
    rows = grouped_driver.client_rows
    monkeypatch.setattr(grouped_driver, "client_rows", lambda batch, cid: rows(batch, 3 if cid == 0 else cid))
    bad, _ = run_round(tmp_path, "bad", failing_module, sft_data, 4)
    assert sorted(cid for _, cid in bad) == [0, 1, 3]
    with pytest.raises(AssertionError, match="differs by"):
        assert_same_uploads(seq, bad)


def nan_on_one_client(values, client_ids, mask=None):
    """``per_client_loss`` with client ``BAD``'s per-token losses NaN (a diverged client, no raise)."""
    bad = (client_ids == BAD).view(-1, *([1] * (values.dim() - 1)))
    scale = torch.where(bad, torch.nan, 1.0).to(values)  # a constant: NaN gradients on client BAD's rows only
    return per_client_loss(values * scale, client_ids, mask)


def test_a_client_with_a_non_finite_loss_leaves_the_others_as_sequential(tmp_path, monkeypatch):
    """A non-finite loss does not raise: its client uploads NaNs, in a group as sequentially, and
    nothing of it reaches the other clients' slots (each slot's gradient comes from its rows only)."""
    monkeypatch.setattr(sft, "per_client_loss", nan_on_one_client)
    seq, _ = run_round(tmp_path, "seq", sft_module, sft_data, "off")
    bat, loop = run_round(tmp_path, "bat", sft_module, sft_data, 4)
    assert loop.group_size == 4
    bad = [k for k in seq if k[1] == BAD]
    assert bad and all(not torch.isfinite(seq[k]["loss"]) and not torch.isfinite(bat[k]["loss"]) for k in bad)
    assert_same_uploads({k: v for k, v in seq.items() if k[1] != BAD}, {k: v for k, v in bat.items() if k[1] != BAD})
