"""What ``data.partition``'s values in a local ``data.dataset`` must be, said before torch is imported.

- ``ByColumn(column)`` takes each row's client from ``column``: a value that is no integer in
  ``0..data.num_clients-1``, or fewer distinct values than clients (a client with no row), was refused
  only after the imports, in two lines naming neither the option nor the file (red team 15 B09:
  ``partition ByColumn(column='client'): client 2 got no examples`` and the ``--debug`` hint).

Only what is certain is refused: a column whose values are not known here (a large file, a hub set, a
null, a value that is no number) is left to the live run. Imports no torch (pyarrow only for a
Parquet column).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.column_types import pandas_values
from lightning_fed.data_columns import csv_cells
from lightning_fed.data_cross_rules import READS_ITS_SOURCE, json_rows, row_line
from lightning_fed.nested_options import PARTITIONS
from lightning_fed.yaml_reading import any_value


def _where(dataset: str, row: int) -> str:
    line = row_line(dataset, row)
    return f"line {line} (row {row})" if line is not None else f"row {row}"


def _column_values(dataset: str, column: str) -> list[Any] | None:
    """Each row's value of ``column`` of the local file ``dataset`` as read by ``datasets`` where that is
    certain here: JSON/JSON Lines rows as ``json`` reads them, a CSV column as pandas types it, a Parquet
    column; ``None`` otherwise (no regular file, too large, not read cleanly, a row without the column)."""
    path = Path(dataset).expanduser()
    try:
        if not path.is_file():
            return None
        suffix = path.suffix.lower()
        if suffix == ".parquet":
            import pyarrow.parquet as pq  # no torch

            return pq.read_table(path, columns=[column]).column(0).to_pylist()
        if suffix == ".csv":
            cells = csv_cells(path)
            typed = pandas_values([row.get(column) for row in cells]) if cells else None
            return None if typed is None else typed[1]
        rows = json_rows(path)
    except Exception:  # noqa: BLE001 - not read cleanly: the data source's to say
        return None
    if not isinstance(rows, list) or not all(isinstance(row, dict) and column in row for row in rows):
        return None
    return [row[column] for row in rows]


def by_column_problem(dataset: str, column: str, values: list[Any], num_clients: int) -> str | None:
    """The line refusing ``ByColumn(column)`` over ``dataset`` whose rows' ``values`` are numbers, one of
    them no client id ``0..num_clients-1``, or fewer distinct than clients (a client without a row), in
    the partitioner's order. ``None`` where a value is not a number (the partitioner's to say)."""
    if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    option = f"data.partition.column {column!r}: data.dataset {dataset!r}"
    ids, clients = f"0..{num_clients - 1}", f"data.num_clients={num_clients}"
    for row, value in enumerate(values):
        if not (math.isfinite(value) and value == int(value) and 0 <= value < num_clients):
            where = _where(dataset, row)
            return f"{option}: {where} has {column!r} {value!r}; ByColumn needs a client id in {ids} ({clients})"
    held = sorted({int(v) for v in values})
    if len(held) == num_clients:
        return None
    shown = ", ".join(str(v) for v in held)
    missing = [str(k) for k in range(num_clients) if k not in held]
    missing_shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    return (
        f"{option} has {len(held)} distinct {column!r} value(s) ({shown}); ByColumn needs a row for each"
        f" client id {ids} ({clients}; no row has {missing_shown})"
    )


def partition_values_problem(data: Any) -> str | None:
    """The line refusing ``data.partition``'s values in the local ``data.dataset`` of the merged ``data:``
    section (module docstring), or ``None``."""
    if not isinstance(data, Mapping) or not isinstance(init_args := data.get("init_args"), Mapping):
        return None
    if not isinstance(data.get("class_path"), str) or data["class_path"].rpartition(".")[2] not in READS_ITS_SOURCE:
        return None
    partition = init_args.get("partition")
    partition = {"class_path": partition} if isinstance(partition, str) else partition
    if not isinstance(partition, Mapping) or not isinstance(partition.get("class_path"), str):
        return None
    module, _, name = partition["class_path"].rpartition(".")
    given = partition.get("init_args") or {}
    dataset, clients = init_args.get("dataset"), any_value(init_args.get("num_clients"))
    if (
        module not in ("", "lightning_fed.datamodules", PARTITIONS)
        or not isinstance(given, Mapping)
        or not isinstance(dataset, str)
    ):
        return None
    if type(clients) is not int or clients < 1:
        return None
    column = given.get("column", "client") if name == "ByColumn" else None
    if not isinstance(column, str):
        return None
    field_map = init_args.get("field_map")
    source = field_map.get(column, column) if isinstance(field_map, Mapping) else column
    if not isinstance(source, str) or (values := _column_values(dataset, source)) is None:
        return None
    return by_column_problem(dataset, column, values, clients)
