"""ReferenceCache: content keys, exact values, compute only what is new, spill to disk."""

import copy
import io
import pickle
import re

import pytest
import torch

from lightning_fed.datamodules.tokenize import PadCollator, tokenize_preference
from lightning_fed.modules.backbone import byte_tokenizer
from lightning_fed.modules.reference_cache import ENTRY_BYTES, ReferenceCache, example_keys


def items():
    tok = byte_tokenizer()
    texts = [("Rate it.\n", "Great.", "Awful."), ("Q\n", "a much longer answer", "no"), ("Hi\n", "yes", "no")]
    return [tokenize_preference(p, c, r, tok, 64, "error") for p, c, r in texts], PadCollator(tok.pad_token_id)


def test_keys_ignore_trailing_padding_but_see_every_field():
    rows, collate = items()
    alone = example_keys(collate([rows[0]]))
    padded = example_keys(collate(rows))  # rows[0] padded to the longest row
    assert alone[0] == padded[0] and len(set(padded)) == 3
    batch = collate([rows[0]])
    for key, change in (
        ("chosen_labels", lambda t: t.masked_fill(t != -100, -100)),  # same tokens, nothing scored
        ("rejected_input_ids", lambda t: t + 1),
        ("chosen_attention_mask", lambda t: torch.cat([t[:, :1] * 0, t[:, 1:]], 1)),  # a hole in the mask
    ):
        other = dict(batch, **{key: change(batch[key])})
        assert example_keys(other) != alone, key
    swapped = {
        k.replace("chosen", "X").replace("rejected", "chosen").replace("X", "rejected"): v for k, v in batch.items()
    }
    assert example_keys(swapped) != alone
    with torch.autocast("cpu", dtype=torch.bfloat16):  # another precision is another value
        assert example_keys(batch) != alone


def shape_dependent(calls):
    """A stand-in reference forward whose values, like a float32 forward's, move with the padded width
    and the size of the batch they are computed in, with a full float32 mantissa (a lossy round
    trip would show)."""

    def compute(batch):
        calls.append(batch)
        n, width = batch["chosen_input_ids"].shape
        ids = batch["chosen_input_ids"].sum(1).float()
        return ids / 3 + width / 1024 + n / 4096, -ids / 11 - width / 1024

    return compute


def test_only_new_rows_are_computed_one_at_a_time_and_values_come_back_bit_exact():
    rows, collate = items()
    calls = []
    compute = shape_dependent(calls)
    cache = ReferenceCache()
    first = collate(rows[:2])
    chosen, rejected = cache.log_probs(first, compute)
    assert [c["chosen_input_ids"].shape[0] for c in calls] == [1, 1]  # each new example alone
    mixed = collate([rows[2], rows[1]])
    c2, r2 = cache.log_probs(mixed, compute)
    assert len(calls) == 3 and calls[-1]["chosen_input_ids"].shape[0] == 1  # only rows[2] is new
    assert torch.equal(c2[1], chosen[1]) and torch.equal(r2[1], rejected[1])
    again = cache.log_probs(collate([rows[1], rows[0], rows[2]]), compute)
    assert len(calls) == 3 and (cache.hits, cache.misses) == (1 + 3, 2 + 1)
    assert torch.equal(again[0], torch.stack([chosen[1], chosen[0], c2[0]]))
    assert again[0].dtype == torch.float32 and again[1].dtype == torch.float32


def test_a_value_does_not_depend_on_the_batch_it_was_first_seen_in():
    """Issue 23: the in-process loop and a Flower client meet an example first in different
    batches (an evaluation batch before round 1, a training batch); the cached reference must be
    the same floats in both."""
    rows, collate = items()
    calls = []
    compute = shape_dependent(calls)
    alone, padded = ReferenceCache(), ReferenceCache()
    a = alone.log_probs(collate([rows[2]]), compute)
    b = padded.log_probs(collate([rows[1], rows[2], rows[0]]), compute)  # rows[2] padded to rows[1]'s width
    assert torch.equal(a[0], b[0][1:2]) and torch.equal(a[1], b[1][1:2])
    # What the forward saw for rows[2] in the wide batch: the example alone, as its own batch of one.
    own = collate([rows[2]])
    assert all(torch.equal(calls[2][k], own[k]) for k in own if k in calls[2]) and calls[2].keys() <= own.keys()
    assert [c["chosen_input_ids"].shape[1] for c in calls[1:]] == [
        max(len(r["chosen_input_ids"]), len(r["rejected_input_ids"])) for r in (rows[1], rows[2], rows[0])
    ]


def test_spills_to_disk_past_the_budget_and_reads_back_exactly(tmp_path):
    keys = [bytes([i]) * 16 for i in range(5)]
    chosen, rejected = torch.randn(5), torch.randn(5)
    cache = ReferenceCache(max_memory_bytes=2 * ENTRY_BYTES, spill_dir=tmp_path / "ref")
    cache.put_many(keys[:2], chosen[:2], rejected[:2])
    assert cache.db_path is None and cache.memory_bytes == 2 * ENTRY_BYTES
    cache.put_many(keys[2:], chosen[2:], rejected[2:])  # 5 entries > budget: all go to disk
    assert cache.memory_bytes == 0 and len(cache) == 5
    assert cache.db_path.parent == tmp_path / "ref" and cache.db_path.exists()
    found = cache.get_many(keys[::-1] + [b"\xff" * 16])
    assert found[-1] is None
    assert torch.equal(torch.tensor([v[0] for v in found[:-1]], dtype=torch.float32), chosen.flip(0))
    assert torch.equal(torch.tensor([v[1] for v in found[:-1]], dtype=torch.float32), rejected.flip(0))
    path = cache.db_path
    cache.close()
    assert not path.exists() and (tmp_path / "ref").is_dir() and len(cache) == 0


def test_default_spill_dir_is_temporary_and_copies_start_empty():
    cache = ReferenceCache(max_memory_bytes=0)
    cache.put_many([b"a" * 16], torch.tensor([1.5]), torch.tensor([-2.5]))
    folder = cache.db_path.parent
    assert folder.name.startswith("lightning-fed-reference-") and len(cache) == 1
    for clone in (copy.deepcopy(cache), pickle.loads(pickle.dumps(cache))):
        assert len(clone) == 0 and clone.db_path is None and clone.max_memory_bytes == 0
    del cache  # the finalizer closes the database and removes the temporary folder
    assert not folder.exists()


def test_state_dict_round_trips_memory_and_spilled_entries_bit_exact(tmp_path):
    keys = [bytes([i]) * 16 for i in range(5)]
    chosen, rejected = torch.randn(5), torch.randn(5)
    cache = ReferenceCache(max_memory_bytes=3 * ENTRY_BYTES, spill_dir=tmp_path / "a")
    cache.put_many(keys[:4], chosen[:4], rejected[:4])  # 4 > 3 entries: spilled to the file
    cache.put_many(keys[4:], chosen[4:], rejected[4:])  # 1 in memory
    state = cache.state_dict()
    assert state["keys"].shape == (5, 16) and state["values"].dtype == torch.float64 and state["dtype"] == "float32"
    buffer = io.BytesIO()
    torch.save(state, buffer)  # a checkpoint is read with weights_only=True
    buffer.seek(0)
    restored = ReferenceCache(spill_dir=tmp_path / "b")
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert len(restored) == 5 and restored.get_many(keys) == cache.get_many(keys)
    assert restored.state_dict()["dtype"] == "float32"  # values come back in the dtype they were computed in
    small = ReferenceCache(max_memory_bytes=ENTRY_BYTES, spill_dir=tmp_path / "c")
    small.load_state_dict(state)  # over its budget: restored straight to its spill file
    assert small.memory_bytes == 0 and small.get_many(keys) == cache.get_many(keys)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"keys": torch.zeros(2, 8, dtype=torch.uint8)},
            "reference_cache.keys must be a uint8 tensor of shape (N, 16), got uint8 of shape (2, 8)",
        ),
        (
            {"values": torch.zeros(2, 2)},
            "reference_cache.values must be a float64 tensor of shape (2, 2), got float32 of shape (2, 2)",
        ),
        ({"values": "x"}, "reference_cache.values must be a float64 tensor of shape (2, 2), got str"),
        (
            {"dtype": "int64"},
            "reference_cache.dtype must be one of ['', 'bfloat16', 'float16', 'float32', 'float64'], got 'int64'",
        ),
    ],
)
def test_a_crafted_cache_state_is_refused_naming_the_field(change, message):
    state = {"keys": torch.zeros(2, 16, dtype=torch.uint8), "values": torch.zeros(2, 2, dtype=torch.float64)}
    state["dtype"] = "float32"
    with pytest.raises(ValueError, match=re.escape(message)):
        ReferenceCache().load_state_dict({**state, **change})
