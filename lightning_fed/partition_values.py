"""What ``data.partition``'s values in a local ``data.dataset`` must be, said before torch is imported.

- ``ByColumn(column)`` takes each row's client from ``column``: a value that is no integer in
  ``0..data.num_clients-1``, or fewer distinct values than clients (a client with no row), was refused
  only after the imports, in two lines naming neither the option nor the file (red team 15 B09:
  ``partition ByColumn(column='client'): client 2 got no examples`` and the ``--debug`` hint).
- ``ByKey(key)`` over a JSON/JSON Lines column that mixes text and numbers (``1`` and ``"1"``): ``datasets``
  reads such a column as JSON text, keeping a string that parses as JSON as it is, so ``1`` and ``"1"``
  are one client key ``'1'`` to the partitioner while ``"a"`` is ``'"a"'``. The early count of distinct
  keys left such a column to the live run (red team 15 B10). Here the keys are counted as training
  counts them (:func:`training_keys`), and two spellings training reads as one key are refused.

Only what is certain is refused: a column whose values are not known here (a large file, a hub set, a
null, a ByColumn value that is no number, a nested value, a string JSON readers may parse otherwise) is
left to the live run. Imports no torch (pyarrow only for a Parquet column).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.column_types import pandas_values
from lightning_fed.data_columns import csv_cells
from lightning_fed.data_cross_rules import READS_ITS_SOURCE, json_rows, row_line, too_few_keys_line
from lightning_fed.nested_options import PARTITIONS
from lightning_fed.yaml_reading import any_value

_JSON_START = frozenset('-0123456789"[{tfnNI')
"""The first characters of a text a JSON reader (``json``, ``ujson``) may parse as a value."""


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


def training_key(value: Any) -> str | None:
    """The client key ``ByKey`` sees for a JSON ``value`` of a column mixing text with numbers or booleans:
    ``datasets`` stores such a column as JSON text, a number or boolean as its JSON, a string as it is
    where a JSON reader parses it (``"1"`` is ``'1'``, as ``1`` is) and quoted where none does (``"a"`` is
    ``'"a"'``). ``None`` where that is not certain here (a float in exponent form, a string ``json``
    refuses that a laxer reader may take)."""
    if isinstance(value, bool) or type(value) is int:
        return json.dumps(value)
    if isinstance(value, float):
        text = repr(value)
        return text if math.isfinite(value) and "e" not in text else None
    if not isinstance(value, str):
        return None
    head = value.lstrip(" \t\n\r")[:1]
    if head not in _JSON_START:
        return json.dumps(value)  # no JSON value starts so: every reader refuses it, so it is quoted
    try:
        parsed = json.loads(value)
    except ValueError:
        return None  # `01`, `nan`: readers differ
    return value if not (isinstance(parsed, float) and not math.isfinite(parsed)) else None


def training_keys(values: list[Any]) -> list[Any] | None:
    """Each row's client key as ``ByKey`` reads the JSON ``values`` of one column: the values themselves
    where they are all text or all integers; :func:`training_key` of each where text is mixed with
    numbers or booleans (``datasets``' JSON text); ``None`` where that is not certain here."""
    if all(isinstance(v, str) for v in values) or all(type(v) is int for v in values):
        return list(values)
    if not any(isinstance(v, str) for v in values):
        return None  # numbers alone (ints and floats): Arrow's promotion, not JSON text
    keys = [training_key(v) for v in values]
    return None if any(k is None for k in keys) else keys


def _spelled(value: Any) -> str:
    kind = "text" if isinstance(value, str) else "a boolean" if isinstance(value, bool) else "a number"
    return f"{json.dumps(value)} ({kind})"


def by_key_problem(dataset: str, key: str, values: list[Any], num_clients: int) -> str | None:
    """The line refusing ``ByKey(key)`` over the JSON/JSON Lines ``dataset`` whose column ``key`` (rows'
    ``values``) mixes text with numbers: two spellings training reads as one client key (``1`` and
    ``"1"``), or fewer distinct keys, counted as training counts them, than ``num_clients``
    (:func:`~lightning_fed.data_cross_rules.too_few_keys_line`, the data module's line)."""
    if all(isinstance(v, str) for v in values) or not any(isinstance(v, str) for v in values):
        return None  # one type: the early count of distinct values (data_columns.py) is training's
    keys = training_keys(values)
    if keys is None:
        return None
    first: dict[str, int] = {}
    for row, spelled in enumerate(keys):
        seen = first.setdefault(spelled, row)
        if values[seen] != values[row] or type(values[seen]) is not type(values[row]):
            return (
                f"data.partition.key {key!r}: data.dataset {dataset!r}: {_where(dataset, row)} has {key!r}"
                f" {_spelled(values[row])} and {_where(dataset, seen)} has {key!r} {_spelled(values[seen])}; ByKey"
                f" reads both as the one client key {spelled!r}: write every {key!r} value one way"
            )
    held = sorted(set(keys))
    return too_few_keys_line(key, dataset, held, num_clients) if len(held) < num_clients else None


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
    column = given.get("column", "client") if name == "ByColumn" else given.get("key") if name == "ByKey" else None
    if not isinstance(column, str):
        return None
    field_map = init_args.get("field_map")
    source = field_map.get(column, column) if isinstance(field_map, Mapping) else column
    if not isinstance(source, str) or (values := _column_values(dataset, source)) is None:
        return None
    if name == "ByColumn":
        return by_column_problem(dataset, column, values, clients)
    if Path(dataset).suffix.lower() not in (".json", ".jsonl"):
        return None  # a CSV or Parquet column holds one type: data_columns.py counts its values
    return by_key_problem(dataset, column, values, clients)
