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

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.column_types import CSV_CHUNK_ROWS, pandas_values
from lightning_fed.data_columns import csv_cells
from lightning_fed.data_cross_rules import field_mapped, json_rows, local_columns
from lightning_fed.read_errors import file_errors


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
    if _matches(dataset, where, field_map or {}) == 0:
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


def _matches(dataset: str, where: Mapping[str, Any], field_map: Mapping[str, str]) -> int | None:
    """How many rows of the local JSON, JSON Lines, CSV or Parquet file ``dataset`` ``where`` keeps, where
    every value compared is text or null; ``None`` otherwise (not read here, numbers...)."""
    if not all(isinstance(v, str) for v in where.values()):
        return None
    columns = {}
    for column in where:
        values = _column(dataset, field_map.get(column, column))
        if values is None or not all(v is None or isinstance(v, str) for v in values):
            return None
        columns[column] = values
    lengths = {len(values) for values in columns.values()}
    if len(lengths) != 1:
        return None
    return sum(all(columns[c][row] == value for c, value in where.items()) for row in range(lengths.pop()))
