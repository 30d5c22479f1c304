"""What the data options need of a data set's columns beyond the partition's own column, said before
torch is imported (red team 8, rows 14 and 15).

:func:`~lightning_fed.nested_options.partition_columns_problem` refuses a partition column that
``data.dataset`` lacks, from the columns known without loading it (a planted set's from its
generator's source, a local file's from its header, schema or rows). The same columns decide three
more mistakes, each refused only after the imports (12 s of CPU, two lines, no option named) or not
at all:

- ``data.group_key`` naming no column (``group_ids``' ``no column``; on a planted set without a
  separate evaluation set it was accepted with exit 0 and never used);
- a ``data.val_dataset`` / ``data.test_dataset`` without the column ``ByKey`` / ``ByColumn``
  assigns its rows to clients by (``by_key_clients``' ``has no column ... to assign its rows to clients by``);
- ``SortedShards(score: <a text column>)`` (the partitioner's ``must be numeric``);
- ``ByKey(key)`` over a local file with fewer distinct values of ``key`` than ``data.num_clients``
  (the partitioner's ``cannot fill``, issue 41 M7: 12 s of CPU, two lines naming no option), or with a
  row without a ``key`` value (red team 15 M2: ``row 0 has no 'user' value``, 6.6 s of CPU, two lines
  naming neither the option nor the file), or an evaluation row whose ``key`` value no training client
  holds (red team 15 M3: two lines naming no file);
- a set without a field its records need (:func:`missing_field_problem`: ``data.dataset`` against its
  data module's ``kind``, and a round hook's public set, red team 10 row 7: FedHDS ``anchors`` of
  instructions on a preference run failed with exit 1 after the round-0 evaluation had written the
  run folder, naming ``data.dataset``);
- a row of a local JSON/JSON Lines/CSV file whose required field is missing, null or empty
  (:func:`blank_row_problem`, red team 11 row 11: after 12 s of imports, naming no line), or of a
  JSON/JSON Lines file whose field holds a number, a boolean, a list or a mapping (:func:`not_text_problem`,
  issue 41: after 10-15 s of imports).

Only what is certain is refused: a set whose columns (or column types) are not known here is left
to the live run. Imports no torch (pyarrow only for a Parquet file's schema).
"""

from __future__ import annotations

import ast
import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.class_parameters import class_chain
from lightning_fed.column_types import csv_field_problem, pandas_values, parquet_field_problem
from lightning_fed.data_cross_rules import (
    MAX_SCANNED_BYTES,
    READS_ITS_SOURCE,
    RECORD_FIELDS,
    absent_column_line,
    blank_field_line,
    csv_blank,
    duplicate_column_line,
    field_mapped,
    json_rows,
    local_columns,
    mapped_column,
    missing_key_line,
    no_key_value,
    not_text_line,
    row_line,
    too_few_keys_line,
    unheld_key_line,
)
from lightning_fed.data_files import local_data_problem
from lightning_fed.nested_options import PARTITIONS, SYNTHETIC_PREFIX, generator_columns
from lightning_fed.read_errors import file_errors
from lightning_fed.yaml_reading import any_value

PLANTED_NUMERIC = frozenset({"client", "follows_group", "flipped"})
"""The planted sets' numeric columns (every other column of theirs holds text); a test builds each
set and holds this against its column types (tests/test_data_columns_cli.py)."""
BY_IDENTITY = {"ByKey": ("key", None), "ByColumn": ("column", "client")}
"""The partitioners whose evaluation rows go to the client of their column's value
(:func:`~lightning_fed.datamodules.eval_partition.evaluation_clients`) -> that option and its default."""
EVALUATION_SETS = ("val_dataset", "test_dataset")


def _columns(dataset: Any, field_map: Any) -> list[str] | None:
    """The columns of ``dataset`` (a planted or a local set) as the data module reads them, or ``None``."""
    if not isinstance(dataset, str):
        return None
    columns = generator_columns(dataset) if dataset.startswith(SYNTHETIC_PREFIX) else local_columns(dataset)
    return field_mapped(columns, field_map) if columns is not None else None


def record_kind(class_path: str) -> str | None:
    """The kind of records (:data:`~lightning_fed.data_cross_rules.RECORD_FIELDS`) the package's data module
    ``class_path`` reads: its class attribute ``kind = "..."``, read from its source (or a base's); ``None``
    where none is written so."""
    from lightning_fed.option_rules import PACKAGES

    for _, node in class_chain(PACKAGES["data"], class_path):
        for stmt in node.body:
            names = [t.id for t in stmt.targets if isinstance(t, ast.Name)] if isinstance(stmt, ast.Assign) else []
            if "kind" in names and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                return stmt.value.value
    return None


def missing_field_problem(
    option: str, dataset: Any, kind: Any, field_map: Any, map_option: str, why: str = ""
) -> str | None:
    """The line refusing the set ``dataset`` (given as ``option``) whose columns, renamed by ``field_map``
    (given as ``map_option``), lack a field that ``kind``'s records need: the line
    :func:`~lightning_fed.datamodules.sources.validate_records` says after the imports (``why``: what
    reads the set so, for a set other than the data module's own). ``None`` where the columns are not
    known here."""
    columns = _columns(dataset, field_map)
    if not isinstance(kind, str) or kind not in RECORD_FIELDS:
        return None
    fields = [*RECORD_FIELDS[kind][0], *RECORD_FIELDS[kind][1]]
    if isinstance(field_map, Mapping) and (unknown := next((f for f in field_map if f not in fields), None)):
        # apply_field_map's line: the map's key is wrong, not the set (tests/test_bad_input.py)
        return f"{map_option}: {unknown!r} is not a {kind} field; valid: {fields}"
    source = _columns(dataset, None)
    if isinstance(field_map, Mapping) and source is not None:  # apply_field_map's next lines, entry by entry
        seen: dict[Any, str] = {}
        for field, column in field_map.items():
            if isinstance(column, str) and column not in source:
                return absent_column_line(map_option, field, column, option, dataset, source)
            if column in seen:
                return duplicate_column_line(map_option, seen[column], field, column)
            seen[column] = field
    if columns is None:
        return None
    missing = next((field for field in RECORD_FIELDS[kind][0] if field not in columns), None)
    if missing is None:
        return None
    return (
        f"{option} {dataset!r}: missing field {missing!r}{why} (columns: {', '.join(columns)};"
        f" map it with {map_option})"
    )


_SCALARS = (str, int, float, bool, type(None))
_ASCII_SPACE = " \t\n\r\f\v"


PANDAS_NA = frozenset(
    {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A"}
    | {"NA", "NULL", "NaN", "None", "n/a", "nan", "null"}
)
"""The cells pandas' ``read_csv`` (``datasets``' CSV reader) reads as missing by default."""


def csv_cells(path: Path) -> list[dict[str, str | None]] | None:
    """The rows of the CSV file ``path`` as cells, as far as certain: a cell pandas reads as missing
    (:data:`PANDAS_NA`, a short row's cells) is ``None``. ``None`` for a file larger than
    :data:`~lightning_fed.data_cross_rules.MAX_SCANNED_BYTES` or a row longer than the header."""
    if path.stat().st_size > MAX_SCANNED_BYTES:
        return None
    with open(path, encoding="utf-8-sig", newline="") as handle:  # pandas drops a BOM too
        records = [cells for cells in csv.reader(handle) if not csv_blank(cells)]  # pandas skips blank lines
    header, body = (records[0], records[1:]) if records else ([], [])
    if any(len(cells) > len(header) for cells in body):
        return None  # more cells than the header: pandas refuses the file
    rows = [{key: cells[i] if i < len(cells) else None for i, key in enumerate(header)} for cells in body]
    return [{k: (None if v is None or v in PANDAS_NA else v) for k, v in row.items()} for row in rows]


def not_text_problem(
    option: str, dataset: str, rows: list[dict[str, Any]], kind: str, field_map: Mapping[str, str] | None
) -> str | None:
    """The line refusing the first row of the JSON/JSON Lines ``rows`` of ``dataset`` whose field of ``kind``'s
    records (renamed by ``field_map``) holds a number, a boolean, a list or a mapping: ``datasets`` reads
    it so (a column of mixed types as JSON values), and :func:`~lightning_fed.datamodules.sources.validate_records`
    refuses it after the imports (``"prompt": 3``, ``"chosen": ["a"]``: 10-15 s of CPU, issue 41). Fields in
    its order (the required ones, then an optional one the rows hold); a required field's first value that
    is not text (a null too) is named, as it names it."""
    required, optional = RECORD_FIELDS[kind]
    for field in (*required, *optional):
        column = (field_map or {}).get(field, field)
        values = [row.get(column) for row in rows]
        if all(value is None or isinstance(value, str) for value in values):
            continue
        row = next(i for i, v in enumerate(values) if not (isinstance(v, str) or (v is None and field in optional)))
        return not_text_line(
            option, dataset, row, field, values[row], row_line(dataset, row), mapped_column(field, field_map)
        )
    return None


def blank_row_problem(option: str, dataset: Any, kind: Any, field_map: Any) -> str | None:
    """The line refusing the first row of the local file ``dataset`` (given as ``option``) whose required
    field (of ``kind``'s records, renamed by ``field_map``) is missing, null or empty, field by field as
    :func:`~lightning_fed.datamodules.sources.validate_records` looks (red team 11 row 11: said after 12 s
    of imports, without the line), or whose field holds no text: a JSON value (:func:`not_text_problem`),
    a CSV or Parquet column typed as numbers (:mod:`lightning_fed.column_types`, issue 41 M5). ``None``
    where that is not certain here: another format, a file not read cleanly, a nested JSON value, a
    whitespace Arrow and Python trim otherwise."""
    if not isinstance(dataset, str) or not isinstance(kind, str) or kind not in RECORD_FIELDS:
        return None
    if field_map is not None and not (
        isinstance(field_map, Mapping) and all(isinstance(v, str) for v in field_map.values())
    ):
        return None
    path = Path(dataset).expanduser()
    suffix = path.suffix.lower()
    try:
        if not path.is_file():
            return None
        if suffix in (".csv", ".parquet"):  # typed by pandas / the schema (lightning_fed/column_types.py)
            if local_columns(dataset) is None or path.stat().st_size > MAX_SCANNED_BYTES:
                return None
            if suffix == ".parquet":
                return parquet_field_problem(option, dataset, path, kind, field_map)
            return csv_field_problem(option, dataset, csv_cells(path) or [], kind, field_map)
        rows = json_rows(path)
    except file_errors():  # not read cleanly: the data source's reader says it (a bug of ours is raised)
        return None
    rows = [{} if row is None else row for row in rows] if isinstance(rows, list) else None  # null: a row of nulls
    if not rows or not all(isinstance(row, dict) for row in rows):
        return None
    if problem := not_text_problem(option, dataset, rows, kind, field_map):
        return problem
    kinds: dict[str, set[type]] = {}
    for row in rows:
        for key, value in row.items():
            if not isinstance(value, _SCALARS):
                return None  # a nested value: how the reader types its column is its to say
            if value is not None:
                kinds.setdefault(key, set()).add(float if type(value) is int else type(value))
    if any(len(found) > 1 for found in kinds.values()):
        return None  # mixed types in a column: the reader's to refuse
    fields = RECORD_FIELDS[kind][0]
    mapped = {field: (field_map or {}).get(field, field) for field in fields}
    if any(kinds.get(column) != {str} for column in mapped.values()):
        return None  # not text, or only nulls (validate_records: "must be text"), or no column at all
    for field, column in mapped.items():
        for index, row in enumerate(rows):
            value = row.get(column)
            if value is not None and value.strip() != value.strip(_ASCII_SPACE):
                return None  # a whitespace Python and Arrow may trim otherwise
            if value is None or not value.strip():
                line = row_line(dataset, index)
                return blank_field_line(
                    option, dataset, index, field, value is None, line, mapped_column(field, field_map)
                )
    return None


def _is_text(dataset: str, column: str) -> bool:
    """Whether ``column`` (of the source, before ``field_map``) of ``dataset`` certainly holds text:
    a planted set's column not in :data:`PLANTED_NUMERIC`, a Parquet column of no numeric or bool
    type, a JSON/JSONL column with a value that is no number, bool or null."""
    if dataset.startswith(SYNTHETIC_PREFIX):
        return column not in PLANTED_NUMERIC
    path = Path(dataset).expanduser()
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq  # no torch

            kind = pq.read_schema(path).field(column).type
            return not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind))
        rows = json_rows(path)  # data_cross_rules.py: local_columns reads them so too
        if rows is None:
            return False
        values = [row.get(column) for row in rows if isinstance(row, dict)]
    except file_errors() + (KeyError,):  # not read cleanly, or no such Parquet column: the live run's to say
        return False
    return any(v is not None and not isinstance(v, (int, float, bool)) for v in values)


def _key_column(dataset: str, column: str) -> list[Any] | None:
    """Each row's value of ``column`` of the local file ``dataset`` (``None``: missing or null), where
    certain as ``ByKey`` reads it: a Parquet column (pyarrow) or JSON/JSON Lines rows or a CSV column as
    pandas types it (:func:`csv_cells`, :func:`~lightning_fed.column_types.pandas_values`) whose values
    (nulls aside) are all text or all numbers; ``None`` otherwise (mixed values, a file not read
    here, no regular file: the partitioner's, or the path check's, to say)."""
    path = Path(dataset).expanduser()
    try:
        if not path.is_file():
            return None  # a FIFO is never opened here (lightning_fed/data_paths.py refuses it)
        if path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq  # no torch

            rows = [{column: value} for value in pq.read_table(path, columns=[column]).column(0).to_pylist()]
        elif path.suffix.lower() == ".csv":  # typed as pandas types the column (column_types.py)
            cells = csv_cells(path)
            typed = pandas_values([row.get(column) for row in cells]) if cells else None
            rows = None if typed is None or typed[0] == "bool" else [{column: value} for value in typed[1]]
        else:
            rows = json_rows(path)
    except file_errors():  # not read cleanly: the data source's to say (red team 15 M1: a bug of ours is raised)
        return None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        return None
    values = [row.get(column) for row in rows]
    given = [v for v in values if v is not None]
    if all(isinstance(v, str) for v in given):
        return values
    return values if all(type(v) in (int, float) for v in given) else None  # a NaN: no value (no_key_value)


def _nested_key_problem(key: str, option: str, dataset: str, column: str) -> str | None:
    """The line refusing the Parquet file ``dataset`` (given as ``option``) whose key ``column`` is of a
    nested Arrow type (a list, a struct, a map): ``ByKey`` sorts its values, and such values do not sort
    (red team 17 B8: ``values of 'user' cannot be sorted`` after the imports, naming neither option nor file)."""
    path = Path(dataset).expanduser()
    if path.suffix.lower() != ".parquet":
        return None
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq  # no torch

        kind = pq.read_schema(path).field(column).type
    except file_errors() + (KeyError,):  # not read cleanly, or no such column: said elsewhere
        return None
    if not pa.types.is_nested(kind):
        return None
    return (
        f"data.partition.key {key!r}: {option} {dataset!r}: its {column!r} column is of Parquet type {kind};"
        " ByKey sorts its key values: text, numbers, booleans, dates or times, not a list, a struct or a map"
    )


def _number_cells(dataset: str, column: str) -> list[str] | None:
    """Each row's cell of the column ``column`` of the CSV file ``dataset`` where pandas types that column
    as numbers (:func:`~lightning_fed.column_types.pandas_values`) and no cell is missing; ``None`` otherwise."""
    path = Path(dataset).expanduser()
    try:
        cells = csv_cells(path) if path.suffix.lower() == ".csv" and path.is_file() else None
    except file_errors():
        return None
    column_cells = [row.get(column) for row in cells or []]
    typed = pandas_values(column_cells) if column_cells else None
    if typed is None or typed[0] not in ("int", "float") or any(cell is None for cell in column_cells):
        return None
    return column_cells  # type: ignore[return-value]


def _merged_cells_problem(key: str, dataset: str, values: list[Any], cells: list[str]) -> str | None:
    """The line refusing two different ``cells`` of a CSV key column that pandas types as the one number
    (``values``): ``007``, ``7`` and ``0070`` are the one client key 7 to ``ByKey`` (red team 17 B23: three
    users trained as one client, or refused with values the file does not spell so)."""
    first: dict[Any, int] = {}
    for row, value in enumerate(values):
        seen = first.setdefault(value, row)
        if cells[seen] != cells[row]:
            return (
                f"data.partition.key {key!r}: data.dataset {dataset!r}: row {row} has {key!r} {cells[row]} and"
                f" row {seen} has {key!r} {cells[seen]}; the CSV column is read as numbers, so ByKey reads both"
                f" as the one client key {value!r}: write every {key!r} value one way, or make the ids text"
                f" (such as u{cells[seen]})"
            )
    return None


def _first_missing(values: list[Any]) -> int | None:
    """The first row without a key value: missing, null or a text empty or of whitespace only (red team 16 B3)."""
    return next((row for row, value in enumerate(values) if no_key_value(value)), None)


def _by_key_problem(init_args: Mapping[str, Any], key: Any, field_map: Any, option: str) -> str | None:
    """``ByKey(key)`` (``key`` renamed by ``field_map``) over the local set ``option`` of ``init_args``, as
    the data module refuses it after 12 s of imports: a row of ``data.dataset`` or of an evaluation set
    without a ``key`` value (:func:`~lightning_fed.data_cross_rules.missing_key_line`, red team 15 M2),
    ``data.dataset`` with fewer distinct values than ``data.num_clients``
    (:func:`~lightning_fed.data_cross_rules.too_few_keys_line`, issue 41 M7), an evaluation row whose
    value no training client holds (:func:`~lightning_fed.data_cross_rules.unheld_key_line`, red team 15
    M3). Said where the values of ``data.dataset`` (and of that set) are certain here."""
    dataset, value = init_args.get("dataset"), init_args.get(option.removeprefix("data."))
    if not isinstance(key, str) or any(
        not isinstance(v, str) or v.startswith(SYNTHETIC_PREFIX) for v in (dataset, value)
    ):
        return None
    source, column = (
        (field_map.get(key, key), mapped_column(key, field_map)) if isinstance(field_map, Mapping) else (key, None)
    )
    for set_option, path in {"data.dataset": dataset, option: value}.items():
        if problem := _nested_key_problem(key, set_option, path, source):
            return problem
    if (training := _key_column(dataset, source)) is None:
        return None
    values = training if option == "data.dataset" else _key_column(value, source)
    if values is not None and (row := _first_missing(values)) is not None:
        line = row_line(value, row)
        return missing_key_line("data.partition.key", key, option, value, row, line, column, values[row])
    held = sorted(set(training))
    if option == "data.dataset":
        cells = _number_cells(dataset, source)
        if cells is not None and (problem := _merged_cells_problem(key, dataset, training, cells)):
            return problem
        spelled = None if cells is None else dict(zip(training, cells, strict=True))  # one cell per key, as checked
        spellings = None if spelled is None else [spelled[value] for value in held]
        clients = any_value(init_args.get("num_clients"))
        if type(clients) is int and len(held) < clients:
            return too_few_keys_line(key, dataset, held, clients, spellings)
        return None
    if values is not None and (row := next((i for i, v in enumerate(values) if v not in set(held)), None)) is not None:
        return unheld_key_line(option, value, row, row_line(value, row), key, values[row], held)
    return None


def _clients_problem(
    option: str, columns: list[str] | None, init_args: Mapping[str, Any], field_map: Any
) -> str | None:
    """The line refusing how ``data.partition`` assigns the rows of the set ``option`` (whose ``columns``,
    renamed by ``field_map``, are known here or ``None``) to clients: ``SortedShards``' text ``score`` and
    ``ByKey``'s training values for ``data.dataset``; an evaluation set's missing client column and
    ``ByKey``'s values for it (module docstring)."""
    name, given = _partition(init_args) or ("", {})
    value = init_args.get(option.removeprefix("data."))
    score = given.get("score")
    if option == "data.dataset" and name == "SortedShards" and isinstance(score, str) and columns is not None:
        source = field_map.get(score, score) if isinstance(field_map, Mapping) else score
        if score in columns and _is_text(value, source):
            return (
                f"data.partition.score {score!r}: data.dataset {value!r} holds text in that column;"
                " SortedShards sorts the rows by a numeric column"
            )
    if option != "data.dataset" and name in BY_IDENTITY and columns is not None:
        key, default = BY_IDENTITY[name]
        column = given.get(key, default)
        if isinstance(column, str) and column not in columns:
            own = _columns(value, None) or columns  # the file's own names (red team 16 B4), not field_map's
            return (
                f"{option} {value!r} has no column {column!r} (data.partition.{key}) to assign its rows to"
                f" clients by (columns: {', '.join(own)})"
            )
    return _by_key_problem(init_args, given.get("key"), field_map, option) if name == "ByKey" else None


def _partition(init_args: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """``data.partition``'s class name and ``init_args`` when it is one of the package's partitioners."""
    partition = init_args.get("partition")
    if isinstance(partition, str):
        partition = {"class_path": partition}
    if not isinstance(partition, Mapping) or not isinstance(partition.get("class_path"), str):
        return None
    module, _, name = partition["class_path"].rpartition(".")
    given = partition.get("init_args") or {}
    if module not in ("", "lightning_fed.datamodules", PARTITIONS) or not isinstance(given, Mapping):
        return None
    return name, given


def data_columns_problem(data: Any) -> str | None:
    """The line refusing ``data.group_key``, an evaluation set's client column, ``SortedShards``'
    ``score`` or ``ByKey``'s key values (module docstring) in the merged ``data:`` section, or ``None``."""
    if not isinstance(data, Mapping) or not isinstance(init_args := data.get("init_args"), Mapping):
        return None
    if not isinstance(data.get("class_path"), str) or data["class_path"].rpartition(".")[2] not in READS_ITS_SOURCE:
        return None  # its records are built by the module: their columns are not the source's
    field_map = init_args.get("field_map")
    kind = record_kind(data["class_path"])
    for name in ("dataset", *EVALUATION_SETS):  # a file datasets cannot read: before any column is asked of it
        if problem := local_data_problem(f"data.{name}", init_args.get(name)):
            return problem
    if problem := missing_field_problem("data.dataset", init_args.get("dataset"), kind, field_map, "data.field_map"):
        return problem
    # the order the data module reads them (FederatedDataModule.setup): the training rows, then their
    # clients; each evaluation set's rows, then theirs
    for name in ("dataset", *EVALUATION_SETS):
        option, value = f"data.{name}", init_args.get(name)
        if name != "dataset" and (problem := missing_field_problem(option, value, kind, field_map, "data.field_map")):
            return problem
        if problem := blank_row_problem(option, value, kind, field_map):
            return problem
        if value is not None and (
            problem := _clients_problem(option, _columns(value, field_map), init_args, field_map)
        ):
            return problem
    sets = [(f"data.{name}", init_args.get(name)) for name in ("dataset", *EVALUATION_SETS)]
    known = [(opt, value, columns) for opt, value in sets if (columns := _columns(value, field_map)) is not None]
    group_key = init_args.get("group_key")
    # the evaluation sets' rows are grouped; without one, group_key groups nothing: held against data.dataset
    given_sets = [option for option, value in sets[1:] if value is not None]
    checked = [k for k in known if k[0] in given_sets] if given_sets else [k for k in known if k[0] == "data.dataset"]
    for option, value, columns in checked if isinstance(group_key, str) else []:
        if group_key not in columns:
            shown = ", ".join(columns)
            return f"data.group_key {group_key!r}: {option} {value!r} has no such column (columns: {shown})"
    return None
