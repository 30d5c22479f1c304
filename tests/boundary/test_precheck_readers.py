"""Property: whatever a local data file holds, the precheck's readers of it (lightning_fed/data_columns.py,
data_cross_rules.py) answer (a line, a value, or ``None``: "not certain here") and never raise.

They catch only what reading a file raises (lightning_fed/read_errors.py), so that a bug of the package's
own is reported as one (tests/test_precheck_bugs_cli.py); an exception a file's content provokes that
is not in that list would now end the precheck with exit 1. Raw bytes, JSON values of every shape, CSV
text with quotes, blank lines and NULs, JSON nested past the recursion limit, and bytes named ``.parquet``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_fed.data_columns import _is_text, _key_column, blank_row_problem
from lightning_fed.data_cross_rules import local_columns

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner))
rows = st.lists(st.dictionaries(st.sampled_from(["prompt", "chosen", "rejected", "user", ""]), values), max_size=5)
csv_text = st.text(alphabet=st.sampled_from('a,"\n\r \x00é1.-'), max_size=60)


@st.composite
def files(draw):
    """(suffix, bytes) of a data file."""
    kind = draw(st.sampled_from(["jsonl", "json", "json_value", "csv", "bytes", "deep"]))
    suffix = draw(st.sampled_from([".jsonl", ".json", ".csv", ".parquet"])) if kind == "bytes" else None
    if kind == "bytes":
        return suffix, draw(st.binary(max_size=64))
    if kind == "csv":
        return ".csv", draw(csv_text).encode("utf-8")
    if kind == "deep":  # past Python's recursion limit: json's RecursionError
        return draw(st.sampled_from([".json", ".jsonl"])), b"[" * 100_000 + b"]" * 100_000
    if kind == "json_value":
        return draw(st.sampled_from([".json", ".jsonl"])), json.dumps(draw(values)).encode()
    records = draw(rows)
    if kind == "json":
        return ".json", json.dumps(records).encode()
    return ".jsonl", "".join(json.dumps(r) + "\n" for r in records).encode()


@settings(max_examples=300, deadline=None)
@given(spec=files(), column=st.sampled_from(["user", "prompt", "nope"]))
def test_the_precheck_readers_answer_for_any_file(spec, column):
    suffix, content = spec
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"data{suffix}"
        path.write_bytes(content)
        dataset = str(path)
        for field_map in (None, {"prompt": "user"}):
            assert isinstance(blank_row_problem("data.dataset", dataset, "preference", field_map), (str, type(None)))
        assert isinstance(local_columns(dataset), (list, type(None)))
        assert isinstance(_key_column(dataset, column), (list, type(None)))
        assert isinstance(_is_text(dataset, column), bool)
