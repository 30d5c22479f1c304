"""EncodingCounts: examples cut or left out, per set and client, counted by hand."""

from __future__ import annotations

import warnings

from lightning_fed.datamodules.encoding_counts import EncodingCounts


def test_counts_per_set_and_client_and_one_warning_per_kind():
    counts = EncodingCounts()
    counts.start("train", 2)
    # client 0: one example kept whole, one cut, one cut that lost most of its prompt
    counts.begin_example()
    counts.kept("train", 0)
    counts.begin_example()
    counts.note_truncation()
    counts.kept("train", 0)
    counts.begin_example()
    counts.note_truncation()
    counts.note_prompt_loss()
    counts.kept("train", 0)
    # client 1: one dropped for its length, one whose prompt would not fit, one kept whole
    counts.begin_example()
    counts.left_out("dropped", "train", 1)
    counts.begin_example()
    counts.left_out("prompt_dropped", "train", 1)
    counts.begin_example()
    counts.kept("train", 1)  # the flags of the example before do not carry over
    assert counts.report() == {
        "truncated": {"train": [2, 0]},
        "dropped": {"train": [0, 1]},
        "prompt_lost": {"train": [1, 0]},
        "prompt_dropped": {"train": [0, 1]},
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counts.warn(max_length=64, truncation="prompt_left", min_prompt_length=8)
    assert [str(w.message) for w in caught] == [
        "data: 2 train examples truncated to fit data.max_length=64 (data.truncation='prompt_left');"
        " per client: [2, 0]",
        "data: 1 train examples dropped to fit data.max_length=64 (data.on_overflow='drop'); per client: [0, 1]",
        "data: 1 train examples dropped: fewer than data.min_prompt_length=8 of their prompt tokens fit"
        " data.max_length=64 (set data.max_completion_length or raise data.max_length); per client: [0, 1]",
        "data: 1 of 2 truncated train examples lost most of their prompt (kept under half its tokens; set"
        " data.max_completion_length or raise data.max_length); per client: [1, 0]",
    ]
