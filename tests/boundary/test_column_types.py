"""Property tests of lightning_fed/column_types.py (issue 41): whatever cells a CSV file's columns hold
(numbers in pandas' forms and others, booleans, missing cells, blanks, text), or whatever type a Parquet
column has, a line the precheck refuses the file with before torch is the line the data source says after
the imports, and a file the data source reads passes the precheck."""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import tempfile
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.boundary.properties import assert_user_error

FIELDS = ("prompt", "chosen", "rejected")
_numbers = st.integers(-(2**60), 2**60).map(str) | st.floats(allow_nan=False, allow_infinity=False).map(repr)
_cells = (
    _numbers
    | st.sampled_from(["1", "-2", "+3", "007", "1.5", ".5", "1e3", "1E-2", " 1", "2 ", "inf", "-Infinity", "1_000"])
    | st.sampled_from(["true", "False", "TRUE", "tRuE", "NA", "null", "", " ", "nan", "N/A", "a", "b c"])
    | st.text(alphabet="ab 1.\t", max_size=4)
)
_SETTINGS = settings(max_examples=40) if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci" else (lambda f: f)


def _lines(path: Path) -> tuple[str | None, str | None]:
    """(the precheck's line, the data source's line) for the preference file ``path``."""
    from lightning_fed.data_columns import data_columns_problem
    from lightning_fed.datamodules.sources import load_records

    data = {"class_path": "lightning_fed.datamodules.PreferenceDataModule", "init_args": {"dataset": str(path)}}
    before = data_columns_problem(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_records(str(path), "preference")
    except Exception as err:  # noqa: BLE001 - the property compares the lines
        return before, assert_user_error(err, str(path))
    return before, None


@_SETTINGS
@given(rows=st.lists(st.tuples(_cells, _cells, _cells), min_size=1, max_size=5))
def test_a_csv_column_is_typed_as_pandas_types_it(rows):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pairs.csv"
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows([FIELDS, *rows])
        path.write_text(text.getvalue(), encoding="utf-8")
        before, after = _lines(path)
    assert before is None or before == after, (before, after)


_TEXT = st.text(alphabet="ab \t", max_size=3) | st.none()
_TYPES = {
    "string": (pa.string(), _TEXT),
    "large_string": (pa.large_string(), _TEXT),
    "string_view": (pa.string_view(), _TEXT),
    "dictionary": (pa.dictionary(pa.int32(), pa.string()), _TEXT),
    "int": (pa.int64(), st.integers(-5, 5) | st.none()),
    "int dictionary": (pa.dictionary(pa.int8(), pa.int16()), st.integers(-5, 5) | st.none()),
    "float": (pa.float64(), st.floats(allow_nan=True) | st.none()),
    "bool": (pa.bool_(), st.booleans() | st.none()),
    "null": (pa.null(), st.none()),
    "list": (pa.list_(pa.int64()), st.lists(st.integers(0, 3), max_size=2) | st.none()),
    "large_list": (pa.large_list(pa.string()), st.lists(st.just("a"), max_size=2) | st.none()),
    "binary": (pa.binary(), st.binary(max_size=2) | st.none()),
    "timestamp": (pa.timestamp("ms"), st.datetimes(dt.datetime(2000, 1, 1), dt.datetime(2030, 1, 1)) | st.none()),
    "date": (pa.date32(), st.dates(dt.date(2000, 1, 1)) | st.none()),
    "decimal": (pa.decimal128(4, 1), st.decimals(-99, 99, places=1) | st.none()),
    "duration": (pa.duration("s"), st.timedeltas(dt.timedelta(0), dt.timedelta(days=9)) | st.none()),
    "struct": (pa.struct([("a", pa.string())]), st.fixed_dictionaries({"a": _TEXT}) | st.none()),
    "map": (pa.map_(pa.string(), pa.string()), st.lists(st.tuples(st.just("a"), st.just("b")), max_size=1)),
}
"""Arrow types of a Parquet column and values of each: text (a dictionary of text ``datasets`` decodes to
text), the numbers ``validate_records`` names by a row's value, and the others the precheck names by
their type (red team 15 M4)."""


@st.composite
def _parquet_columns(draw):
    size = draw(st.integers(1, 4))
    columns = {}
    for field in FIELDS:
        kind, values = _TYPES[draw(st.sampled_from(list(_TYPES)))]
        columns[field] = pa.array([draw(values) for _ in range(size)], type=kind)
    return pa.table(columns)


def _same_refusal(before: str | None, after: str | None) -> bool:
    """Whether the precheck's line ``before`` is the data source's ``after``: the same line, or a line
    naming a Parquet type (``field 'prompt' must be text; its Parquet type is binary``) where the data
    source names the same field by a row's value (``field 'prompt' must be text; row 0 has b'a'``); or a
    refusal of a file ``datasets`` cannot read at all (a map column: ``cannot read ... as parquet``)."""
    if before is None or before == after or (after is not None and " as parquet: Arrow type map<" in after):
        return True
    field, typed, _ = before.partition(" must be text; its Parquet type is ")
    return bool(typed) and after is not None and after.startswith(f"{field} must be text")


@_SETTINGS
@given(table=_parquet_columns())
def test_a_parquet_column_is_refused_as_the_reader_refuses_it(table):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pairs.parquet"
        pq.write_table(table, path)
        before, after = _lines(path)
    assert _same_refusal(before, after), (before, after)
