"""What ``HeldOutRouge``'s ``where`` needs of its held-out set, said before torch.

``where`` keeps the rows of the hook's ``dataset`` whose columns (renamed by its ``field_map``) equal
the given values (:func:`~lightning_fed.evaluation.heldout.held_out_examples`). A column the set does
not have, or a filter no row passes, was refused after the imports and a trained round (a ``version_0``
folder written), exit 1, in a line naming no option: ``error: `where`: '/d/held.jsonl' has no column
'topic' (...)``. Here, for a local file whose columns (and, for JSON and JSON Lines, text values) are
certain, the line names ``federation.hooks[i].where`` and ``federation.hooks[i].dataset``. A filter
keeping no row is found in a JSON, JSON Lines, CSV (typed as pandas types it) or Parquet file whose
compared columns are text (red team 17 B9: a Parquet or CSV set's was said only after a round).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.column_types import CSV_CHUNK_ROWS, pandas_values
from lightning_fed.data_columns import csv_cells
from lightning_fed.data_cross_rules import field_mapped, json_rows, local_columns
from lightning_fed.read_errors import file_errors

_INTEGER_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)")
"""How Python writes an integer (``str``): the text ``where`` matches an integer column's value by."""


def where_problem(index: int, init_args: Mapping[str, Any]) -> str | None:
    """The line refusing ``federation.hooks[index]`` (a ``HeldOutRouge``) whose ``where`` names a column
    its local ``dataset`` lacks, or keeps none of its rows; ``None`` where that is not certain here."""
    where, dataset, field_map = init_args.get("where"), init_args.get("dataset"), init_args.get("field_map")
    if not isinstance(where, Mapping) or not where or not isinstance(dataset, str):
        return None
    columns = local_columns(dataset)
    renamed = field_mapped(columns, field_map) if columns is not None else None
    if renamed is None:
        return None
    hook = f"federation.hooks[{index}]"
    for column in where:
        if column not in renamed:
            shown = ", ".join(renamed)
            return f"{hook}.where: {hook}.dataset {dataset!r} has no column {column!r} (columns: {shown})"
    found = _matches(dataset, where, field_map or {})
    if isinstance(found, tuple):
        column, value = found
        return (
            f"{hook}.where.{column}: column {column!r} of {hook}.dataset {dataset!r} holds integers,"
            f" matched by their text ('0', '1', '-2'...); got {value!r}"
        )
    if found == 0:
        return f"{hook}.where: no row of {hook}.dataset {dataset!r} matches where={dict(where)}"
    return None


def _column(dataset: str, column: str) -> list[Any] | None:
    """Each row's value of ``column`` of the local file ``dataset`` as ``datasets`` reads it (a missing one
    ``None``): JSON/JSON Lines rows as ``json`` reads them, a CSV column as pandas types it
    (:func:`~lightning_fed.column_types.pandas_values`), a Parquet column (pyarrow, no torch); ``None``
    where that is not certain here (too large, not read cleanly: the data source's reader says it)."""
    path = Path(dataset).expanduser()
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq  # no torch (tests/test_data_model_options_cli.py)

            return pq.read_table(path, columns=[column]).column(0).to_pylist()
        if suffix == ".csv":
            cells = csv_cells(path)
            if not cells or len(cells) > CSV_CHUNK_ROWS:  # chunks typed alone: not certain
                return None
            typed = pandas_values([row.get(column) for row in cells])
            return None if typed is None else typed[1]
        rows = json_rows(path)
    except file_errors() + (KeyError,):  # not read cleanly: the data source's reader says it
        return None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        return None
    return [row.get(column) for row in rows]


def _text(value: Any) -> Any:
    """``value`` as ``where`` matches it (lightning_fed.evaluation.heldout.where_text): text as it is, an
    integer by its text."""
    return str(value) if type(value) is int else value


def _matches(dataset: str, where: Mapping[str, Any], field_map: Mapping[str, str]) -> int | tuple[str, str] | None:
    """How many rows of the local JSON, JSON Lines, CSV or Parquet file ``dataset`` ``where`` keeps, where
    every column compared holds text or integers (nulls aside); ``(column, value)`` for a text value no
    integer of an integer column is written as; ``None`` otherwise (not read here, floats, mixed...)."""
    if not all(isinstance(v, str) for v in where.values()):
        return None
    columns = {}
    for column, value in where.items():
        values = _column(dataset, field_map.get(column, column))
        given = [v for v in values or [] if v is not None]
        if values is None:
            return None
        if given and all(type(v) is int for v in given):
            if not _INTEGER_TEXT.fullmatch(value):
                return column, value
        elif not all(isinstance(v, str) for v in given):
            return None
        columns[column] = [_text(v) for v in values]
    lengths = {len(values) for values in columns.values()}
    if len(lengths) != 1:
        return None
    return sum(all(columns[c][row] == value for c, value in where.items()) for row in range(lengths.pop()))
