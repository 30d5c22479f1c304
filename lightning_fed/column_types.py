"""Which column of a local CSV or Parquet file ``datasets`` reads as something other than text, said
before torch is imported (issue 41, the neighbours of :mod:`lightning_fed.data_files`).

A CSV column of numbers only (``prompt`` = ``1``, ``2``...) is typed by pandas' ``read_csv`` as
``int64`` (``float64`` with a missing cell, ``bool`` for ``true``/``false``), a Parquet column by its
schema: :func:`~lightning_fed.datamodules.sources.validate_records` refused either only after the
imports (``field 'prompt' must be text; row 0 has 1``: 15-20 s of CPU). :func:`csv_field_problem` and
:func:`parquet_field_problem` say that line before them, field by field in the order it checks them
(a required field's empty row before a later field's type). Only what is certain is said: a cell
pandas may read otherwise than the rules below (spaces around a number, ``inf``, 16 digits and
more), a CSV file of more rows than ``datasets`` reads in one chunk, or a file larger than
:data:`~lightning_fed.data_cross_rules.MAX_SCANNED_BYTES` is left to the reader. A Parquet column of
any other type that is no text (a list, binary, a timestamp, a struct, a map...) is refused by its
Arrow type (red team 15 M4: 6-7 s of CPU later). Imports pyarrow (no torch) for a Parquet file only,
never pandas.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.data_cross_rules import RECORD_FIELDS, blank_field_line, not_text_line

CSV_CHUNK_ROWS = 10_000
"""``datasets``' CSV builder reads ``chunksize`` (10 000) rows per ``read_csv`` call, each typed alone:
a longer file's first rows may be typed otherwise than the whole column."""
_INTEGER = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,2})?")
_TRUE, _FALSE = frozenset({"True", "TRUE", "true"}), frozenset({"False", "FALSE", "false"})
_ASCII_SPACE = " \t\n\r\f\v"


def _may_be_number(cell: str) -> bool:
    """Whether pandas may read ``cell`` as a number or a bool by a rule not followed here."""
    if cell.strip().lower() in ("true", "false"):
        return True
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _digits(cell: str) -> int:
    """The digits of a decimal number's mantissa after its leading zeros."""
    return len(re.sub(r"[^0-9]", "", re.split(r"[eE]", cell)[0]).lstrip("0"))


def pandas_values(cells: list[str | None]) -> tuple[str, list[Any]] | None:
    """``(type, values)`` of a CSV column of ``cells`` (``None``: a cell pandas reads as missing) as
    pandas' ``read_csv`` types it and ``datasets`` hands it on: ``"text"`` (the cells as given),
    ``"int"``, ``"float"`` (missing cells ``None``; a column of integers with one is ``float64``),
    ``"bool"``. ``None`` where that is not certain here."""
    given = [cell for cell in cells if cell is not None]
    if not given:
        return "float", list(cells)  # only missing cells: float64 of NaN, nulls to datasets
    if all(cell in _TRUE or cell in _FALSE for cell in given):
        return "bool", [None if cell is None else cell in _TRUE for cell in cells]
    if all(_INTEGER.fullmatch(cell) and abs(int(cell)) < 2**53 for cell in given):
        if len(given) == len(cells):
            return "int", [int(cell) for cell in cells]
        return "float", [None if cell is None else float(int(cell)) for cell in cells]
    if all(_FLOAT.fullmatch(cell) and _digits(cell) <= 15 for cell in given):  # any parser rounds these alike
        return "float", [None if cell is None else float(cell) for cell in cells]
    if any(_may_be_number(cell) for cell in given):
        return None  # numbers in forms pandas may read otherwise (` 1`, `inf`, `1e400`), or mixed
    return "text", list(cells)


def _blank_row(values: list[Any]) -> int | None | bool:
    """The first row of text ``values`` whose value is missing or blank, ``None`` if none, ``False`` where
    Python and Arrow trim a value otherwise (not certain)."""
    for index, value in enumerate(values):
        if value is not None and value.strip() != value.strip(_ASCII_SPACE):
            return False
        if value is None or not value.strip():
            return index
    return None


def _fields(kind: str, columns: list[str], field_map: Mapping[str, str] | None) -> list[tuple[str, str, bool]] | None:
    """``(field, its column, required)`` in the order ``validate_records`` checks them: the required
    fields, then the optional ones the source holds; ``None`` if a required field's column is absent."""
    required, optional = RECORD_FIELDS[kind]
    fields = [(field, (field_map or {}).get(field, field), True) for field in required]
    if any(column not in columns for _, column, _ in fields):
        return None  # a missing field: data_columns.missing_field_problem's
    extra = [(field, (field_map or {}).get(field, field), False) for field in optional]
    return fields + [entry for entry in extra if entry[1] in columns]


def _field_problem(
    option: str, dataset: str, field: str, column: str, required: bool, typed: tuple[str, list[Any]]
) -> str | None:
    """``validate_records``' line for one field whose values are ``typed``, or ``None`` (nothing found);
    raises ``LookupError`` where its line is not certain."""
    kind, values = typed
    named = column if column != field else None
    if kind != "text":
        row = next((i for i, v in enumerate(values) if v is not None or required), None)
        if row is None:
            raise LookupError(field)  # an optional column of nulls typed as numbers: the reader's to say
        return not_text_line(option, dataset, row, field, values[row], None, named)
    if not required:
        return None
    row = _blank_row(values)
    if row is False:
        raise LookupError(field)
    return None if row is None else blank_field_line(option, dataset, row, field, values[row] is None, None, named)


def csv_field_problem(
    option: str, dataset: str, rows: list[dict[str, str | None]], kind: str, field_map: Mapping[str, str] | None
) -> str | None:
    """The line refusing the CSV ``rows`` (cells as read, a missing one ``None``) of ``dataset`` (given as
    ``option``): a field pandas types as no text (:func:`pandas_values`), a required field missing or
    blank, in ``validate_records``' order; ``None`` where nothing is found or not certain."""
    if not rows or len(rows) > CSV_CHUNK_ROWS:
        return None
    fields = _fields(kind, list(rows[0]), field_map)
    try:
        for field, column, required in fields or []:
            typed = pandas_values([row.get(column) for row in rows])
            if typed is None:
                return None
            if problem := _field_problem(option, dataset, field, column, required, typed):
                return problem
    except LookupError:
        return None
    return None


def parquet_type_line(option: str, dataset: str, field: str, column: str, arrow: Any) -> str:
    """The line refusing the Parquet file ``dataset`` (given as ``option``) whose ``field``, read from
    ``column``, is of the Arrow type ``arrow`` that is no text and no number (a list, binary, a timestamp,
    a struct...): named by its type, which the schema makes certain, where the value ``datasets`` would
    decode from it is not (a map or a UUID it does not read at all)."""
    named = f"{field!r} (column {column!r})" if column != field else repr(field)
    return f"{option} {dataset!r}: field {named} must be text; its Parquet type is {arrow}"


def parquet_field_problem(
    option: str, dataset: str, path: Path, kind: str, field_map: Mapping[str, str] | None
) -> str | None:
    """The line refusing the Parquet file ``path`` of ``dataset`` (given as ``option``) whose field's column
    is of an integer, float, boolean or null type (issue 41 M5, said as ``validate_records`` says it) or of
    any other type that is no text (red team 15 M4: :func:`parquet_type_line`), or whose required text field
    is missing or blank in a row, in ``validate_records``' order; ``None`` where nothing is found or not
    certain. Text is ``string``, ``large_string``, ``string_view`` or a dictionary of them (``datasets``
    decodes a dictionary to its values)."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # no torch (tests/test_data_model_options_cli.py)

    schema = pq.read_schema(path)
    fields = _fields(kind, list(schema.names), field_map)
    typed_as = {"int": pa.types.is_integer, "float": pa.types.is_floating, "bool": pa.types.is_boolean}
    typed_as["null"] = pa.types.is_null
    typed_as["text"] = lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
    try:
        for field, column, required in fields or []:
            arrow = schema.field(column).type
            decoded = arrow.value_type if pa.types.is_dictionary(arrow) else arrow
            kind_of = next((name for name, test in typed_as.items() if test(decoded)), None)
            if kind_of is None:
                return parquet_type_line(option, dataset, field, column, arrow)
            values = pq.read_table(path, columns=[column]).column(0).to_pylist()
            if problem := _field_problem(option, dataset, field, column, required, (kind_of, values)):
                return problem
    except LookupError:
        return None
    return None
