"""The rules of the data options that depend on another option, declared once, without torch (issue 41).

A rule of :mod:`lightning_fed.option_rules` holds one option against fixed bounds; these hold one
option against another: the length budgets against ``data.max_length`` (TRL's
``max_prompt_length`` / ``max_completion_length``, and the fewest prompt tokens a cut keeps),
``data.synthetic_args.num_clients`` against ``data.num_clients``, and
``federation.clients_per_round`` against ``data.num_clients``. The data module
(:class:`~lightning_fed.datamodules.FederatedDataModule`) and the round sampler
(:func:`lightning_fed.federation.sampling.check_clients_per_round`) refuse with these functions, and
the precheck (:func:`lightning_fed.class_sections.class_problem`,
:meth:`lightning_fed.config_values.Merged.problem`) applies them to the merged config before torch
is imported: ``data.max_prompt_length: 500`` with ``max_length: 160`` was refused 11 s of CPU later.
So is a partition's column (``data.partition.key``) that ``data.dataset`` lacks, where its columns are
known without loading it (:func:`local_columns`; a planted set's from its generator's source,
:func:`lightning_fed.nested_options.partition_columns_problem`).

The precheck applies a rule only where the values it needs are certain: given in the config (or the
data module's defaults below, which its signature uses) and of the right type (the type is the
parser's to refuse). Imports nothing but the standard library (and pyarrow, which imports no torch,
for a Parquet file's schema).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.read_errors import file_errors
from lightning_fed.yaml_reading import any_value

MAX_LENGTH = 256
"""Default of ``data.max_length`` (:class:`~lightning_fed.datamodules.FederatedDataModule`'s signature)."""
ON_OVERFLOW = "error"
"""Default of ``data.on_overflow``."""
MIN_PROMPT_LENGTH = 16
"""Default of ``data.min_prompt_length`` (capped at half of ``max_length``)."""
SYNTHETIC_SIZES_ONLY = frozenset({"RLFTDataModule"})
"""The package's data modules whose ``synthetic_args.num_clients`` only sizes the set (their
``synthetic_clients_are_num_clients`` is ``False``): it may differ from ``data.num_clients``."""
_SYNTHETIC = "synthetic:"
RECORD_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "instruction": (("instruction", "output"), ("input",)),
    "preference": (("prompt", "chosen", "rejected"), ()),
    # Unlabeled prompts, e.g. the server's instructions for FedBis' RLFT (Sec. 4).
    "prompt": (("prompt",), ()),
}
"""A kind of records -> (required fields, optional fields): what
:func:`~lightning_fed.datamodules.sources.validate_records` holds a data set's columns against (a data
module's ``kind``, a hook's public set read as the run's records)."""


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def default_min_prompt_length(max_length: int, max_prompt_length: int | None) -> int:
    """``data.min_prompt_length`` when unset: :data:`MIN_PROMPT_LENGTH`, at most half of either budget."""
    return max(1, min(MIN_PROMPT_LENGTH, max_length // 2, (max_prompt_length or max_length) // 2))


def length_budget_problems(
    max_length: int, max_prompt: int | None, max_completion: int | None, min_prompt: int, truncate: bool
) -> list[str]:
    """What is wrong with the length budgets (each problem names its field and value).

    ``min_prompt_length`` is held against ``max_length`` only when examples are truncated to
    fit it (``truncate``); otherwise only a prompt budget can cut a prompt, and only a valid one
    (a ``max_prompt_length`` out of range is its own problem).
    """
    problems = []
    for name, value in (("max_prompt_length", max_prompt), ("max_completion_length", max_completion)):
        if value is not None and not 1 <= value < max_length:
            problems.append(f"data.{name} must be in [1, data.max_length={max_length}), got {value}")
    if min_prompt < 1 or (truncate and min_prompt >= max_length):
        problems.append(f"data.min_prompt_length must be in [1, data.max_length={max_length}), got {min_prompt}")
    elif max_prompt is not None and 1 <= max_prompt < max_length and min_prompt > max_prompt:
        problems.append(f"data.min_prompt_length={min_prompt} must be <= data.max_prompt_length={max_prompt}")
    return problems


def synthetic_clients_problem(dataset: Any, synthetic_args: Any, num_clients: Any) -> str | None:
    """A planted set's ``synthetic_args.num_clients`` other than ``data.num_clients`` (for a data
    module whose synthetic clients are its clients)."""
    if not isinstance(dataset, str) or not dataset.startswith(_SYNTHETIC) or not isinstance(synthetic_args, Mapping):
        return None
    # a quoted number is the number to the parser (synthetic_args is a mapping of Any, num_clients an int)
    given, num_clients = any_value(synthetic_args.get("num_clients", num_clients)), any_value(num_clients)
    if given == num_clients:
        return None
    return (
        f"data.synthetic_args.num_clients={given} conflicts with data.num_clients={num_clients};"
        " leave synthetic_args.num_clients out (it is data.num_clients)"
    )


def data_cross_problems(class_name: str, init_args: Mapping[str, Any]) -> list[str]:
    """The precheck's: the lines the package's data module ``class_name`` refuses ``init_args`` with
    (the options :mod:`lightning_fed.option_rules` already passed), where the values are certain."""
    problems = []
    # typed ints: a quoted number is the number to the parser (yaml_reading.any_value)
    max_length = any_value(init_args.get("max_length", MAX_LENGTH))
    budgets = [any_value(init_args.get(k)) for k in ("max_prompt_length", "max_completion_length", "min_prompt_length")]
    if _integer(max_length) and all(v is None or _integer(v) for v in budgets):
        max_prompt, max_completion, min_prompt = budgets
        if min_prompt is None:
            min_prompt = default_min_prompt_length(max_length, max_prompt)
        truncate = init_args.get("on_overflow", ON_OVERFLOW) == "truncate"
        problems += length_budget_problems(max_length, max_prompt, max_completion, min_prompt, truncate)
    num_clients = any_value(init_args.get("num_clients"))
    if class_name not in SYNTHETIC_SIZES_ONLY and _integer(num_clients):
        if problem := synthetic_clients_problem(init_args.get("dataset"), init_args.get("synthetic_args"), num_clients):
            problems.append(problem)
    return problems


PARTITION_COLUMNS = {"Dirichlet": "key", "ByKey": "key", "SortedShards": "score", "ByColumn": "column"}
"""The partitioners of :mod:`lightning_fed.datamodules.partition` -> their option naming a column of
the data set (``ByColumn``'s defaults to ``client``)."""
PARTITION_DEFAULTS = {"ByColumn": "client"}
READS_ITS_SOURCE = frozenset({"PreferenceDataModule", "InstructionDataModule", "SelectorDataModule"})
"""The package's data modules that partition ``data.dataset``'s rows as read (``field_map``
applied): they keep :class:`~lightning_fed.datamodules.FederatedDataModule`'s ``load_records``.
The others build their records themselves (their columns are not the source's)."""
MAX_SCANNED_BYTES = 16 * 2**20
"""A JSON file's columns are its rows' keys (any row may add one): a larger file is not read here."""


def text_column_array(text: str) -> bool:
    """Whether the JSON array ``text`` is read by ``datasets``' JSON builder as one ``text`` column (each
    item a row ``{"text": item}``): no ``{`` before the first ``"`` of its first 100 characters (its test
    for "a list of strings"; numbers, lists and strings alike)."""
    return "{" not in text.lstrip()[:100].split('"', 1)[0]


def json_rows(path: Path) -> Any:
    """The rows of the JSON (one array) or JSON Lines file ``path`` as ``json`` reads them (an array
    ``datasets`` reads as one ``text`` column, :func:`text_column_array`, as such rows), or ``None`` for a
    file of another suffix or larger than :data:`MAX_SCANNED_BYTES` (not scanned here). Raises what reading
    or parsing raises (the callers leave such a file to the data source's reader); :func:`local_columns`
    and :func:`lightning_fed.data_columns.data_columns_problem` read rows with it; no regular file (a
    FIFO) is never opened."""
    if not path.is_file() or path.suffix.lower() not in (".json", ".jsonl") or path.stat().st_size > MAX_SCANNED_BYTES:
        return None
    text = path.read_text(encoding="utf-8-sig")  # datasets drops a BOM too
    if text.lstrip().startswith("["):
        rows = json.loads(text)
        return [{"text": item} for item in rows] if isinstance(rows, list) and text_column_array(text) else rows
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def row_line(dataset: str, row: int) -> int | None:
    """The line (from 1, as an editor shows it) of row ``row`` (from 0, as ``datasets`` indexes it) of the
    JSON Lines file ``dataset`` (blank lines hold no row), or ``None``: a JSON array, another format, a
    file larger than :data:`MAX_SCANNED_BYTES` or not read cleanly."""
    path = Path(dataset).expanduser()
    try:
        if path.suffix.lower() not in (".json", ".jsonl") or path.stat().st_size > MAX_SCANNED_BYTES:
            return None
        text = path.read_text(encoding="utf-8-sig")  # datasets drops a BOM too
    except (OSError, UnicodeDecodeError):
        return None
    if text.lstrip().startswith("["):
        return None
    numbers = [number for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    return numbers[row] if 0 <= row < len(numbers) else None


def bad_json_line(path: Path) -> str | None:
    """Where the JSON (one array) or JSON Lines file ``path`` is not valid JSON, as the live reader's
    line says it (:func:`~lightning_fed.datamodules.sources.load_local`): ``line 2 (row 1) is not valid
    JSON: Expecting ':' delimiter`` (the row from 0 as ``datasets`` indexes it, blank lines holding none;
    trust_boundary.md), ``not valid JSON at line 3: ...`` in an array; ``None`` where the text is one
    JSON value (the reader's to judge) or every line is. Red team 12 row 10: said after torch, the file
    named twice, no row. Raises what reading raises (``OSError``, ``UnicodeDecodeError``)."""
    text = path.read_text(encoding="utf-8-sig")  # datasets drops a BOM too
    try:
        json.loads(text)
        return None  # one JSON value: whether the reader takes it is its to say
    except json.JSONDecodeError as err:
        if text.lstrip().startswith("["):
            return f"not valid JSON at line {err.lineno}: {err.msg}"
    row = 0
    for number, line in enumerate(text.split("\n"), start=1):  # lines as an editor counts them
        if not line.strip():
            continue
        try:
            json.loads(line)
        except json.JSONDecodeError as err:
            return f"line {number} (row {row}) is not valid JSON: {err.msg}"
        row += 1
    return None


def mapped_column(field: str, field_map: Any) -> str | None:
    """The source's column ``data.field_map`` reads ``field`` from, where it names one other than ``field``."""
    column = field_map.get(field) if isinstance(field_map, Mapping) else None
    return column if isinstance(column, str) and column != field else None


def blank_field_line(
    option: str, dataset: str, row: int, field: str, missing: bool, line: int | None, column: str | None = None
) -> str:
    """The line refusing row ``row`` of ``dataset`` (given as ``option``) whose required ``field`` is
    missing or null (``missing``) or empty: :func:`~lightning_fed.datamodules.sources.validate_records`'
    after the imports, the precheck's (:func:`lightning_fed.data_columns.blank_row_problem`) before them.
    A row of a JSON Lines file is named with its ``line`` (trust_boundary.md: ``line 4 (row 3)``); a field
    read from another ``column`` (``data.field_map``) is named with it, the name in the user's file."""
    where = f"line {line} (row {row})" if line is not None else f"row {row}"
    if column is not None:
        what = (
            f"no {field!r} (column {column!r}: missing or null)"
            if missing
            else f"an empty {field!r} (column {column!r})"
        )
    else:
        what = f"no {field!r} (missing or null)" if missing else f"an empty {field!r}"
    return f"{option} {dataset!r}: {where} has {what}"


def not_text_line(
    option: str, dataset: str, row: int, field: str, value: Any, line: int | None, column: str | None = None
) -> str:
    """The line refusing row ``row`` of ``dataset`` (given as ``option``) whose ``field`` holds ``value``, a
    number, a boolean, a list or a mapping where text is needed:
    :func:`~lightning_fed.datamodules.sources.validate_records`' after the imports, the precheck's
    (:func:`lightning_fed.data_columns.not_text_problem`) before them; a field read from another ``column``
    (``data.field_map``) is named with it."""
    where = f"line {line} (row {row})" if line is not None else f"row {row}"
    named = f"{field!r} (column {column!r})" if column is not None else repr(field)
    return f"{option} {dataset!r}: field {named} must be text; {where} has {value!r}"


def absent_column_line(map_option: str, field: str, column: Any, option: str, dataset: str, columns: list[str]) -> str:
    """The line refusing ``<map_option>.<field>`` (``data.field_map.prompt``) naming ``column``, which ``dataset``
    (given as ``option``) lacks: :func:`~lightning_fed.datamodules.sources.apply_field_map`'s after the imports,
    the precheck's (:func:`lightning_fed.data_columns.missing_field_problem`) before them (issue 41: 10-15 s of
    CPU later)."""
    shown = ", ".join(columns)
    return f"{map_option}.{field}: column {column!r} is not in {option} {dataset!r} (columns: {shown})"


def duplicate_column_line(map_option: str, first: str, field: str, column: Any) -> str:
    """The line refusing ``map_option`` (``data.field_map``) that maps two fields to one ``column``:
    :func:`~lightning_fed.datamodules.sources.apply_field_map`'s after the imports (in two lines, 15 s of
    CPU later on 08c1cba), the precheck's (:func:`lightning_fed.data_columns.missing_field_problem`) before."""
    return f"{map_option}: {first!r} and {field!r} both map to column {column!r}"


def csv_blank(cells: list[str]) -> bool:
    """Whether a CSV record is no row to pandas: an empty line or one of spaces only (``skip_blank_lines``)."""
    return not cells or (len(cells) == 1 and not cells[0].strip())


def local_columns(dataset: str) -> list[str] | None:
    """The columns of the local file ``dataset`` as ``datasets`` reads it (a CSV's header, a Parquet
    file's schema, the keys of a JSON file's rows in the order first seen), or ``None`` if not known
    here (no such file, a folder, a larger JSON file, anything not read cleanly: the reader's to say)."""
    path = Path(dataset).expanduser()
    suffix = path.suffix.lower()
    try:
        if not path.is_file():
            return None
        if suffix == ".csv":
            with open(path, encoding="utf-8-sig", newline="") as handle:  # pandas drops a BOM too
                records = (cells for cells in csv.reader(handle) if not csv_blank(cells))
                header, first = next(records, None), next(records, None)
            if first is not None and header is not None and len(first) == len(header) + 1:
                return None  # pandas reads the first cells as an index: its columns are not the header
            return header if header and len(set(header)) == len(header) and all(header) else None
        if suffix == ".parquet":
            import pyarrow.parquet as pq  # no torch (tests/test_data_model_options_cli.py)

            return list(pq.read_schema(path).names)
        rows = json_rows(path)
    except file_errors():  # a file not read cleanly is the data source's to refuse (a bug of ours is raised)
        return None
    rows = [row for row in rows if row is not None] if isinstance(rows, list) else None  # null: a row of nulls
    if not rows or not all(isinstance(row, dict) for row in rows):
        return None
    columns = list(dict.fromkeys(str(key) for row in rows for key in row))
    return columns or None  # objects without keys: datasets reads no rows (data_files.json_shape_problem)


def field_mapped(columns: list[str], field_map: Any) -> list[str] | None:
    """``columns`` renamed by ``data.field_map`` as :func:`~lightning_fed.datamodules.sources.apply_field_map`
    renames them (a field's own column dropped when another is mapped to it); ``None`` for a map it refuses."""
    if field_map is None or field_map == {}:
        return columns
    if not isinstance(field_map, Mapping):
        return None
    renames = {}
    for field, column in field_map.items():
        if not isinstance(field, str) or column not in columns or column in renames:
            return None
        renames[column] = field
    shadowed = {f for c, f in renames.items() if c != f and f in columns and f not in renames}
    return [renames.get(c, c) for c in columns if c not in shadowed]


def partition_column_problem(
    partition: str, given: Mapping[str, Any], dataset: str, columns: list[str], source: list[str], field_map: Any
) -> str | None:
    """The line refusing the column a partitioner (:data:`PARTITION_COLUMNS`; ``given``: its
    ``init_args``) names that ``data.dataset``'s ``columns`` (its ``source`` columns renamed by
    ``field_map``) lack: the partitioner's ``no column`` after the imports (15 s of CPU), naming no
    option. The file's own columns are listed (red team 15 L1: the renamed ones were, names the file
    does not hold); a column ``field_map`` renames is named with the field it is read as."""
    option = PARTITION_COLUMNS.get(partition)
    value = given.get(option, PARTITION_DEFAULTS.get(partition)) if option else None
    if not isinstance(value, str) or value in columns:
        return None
    named = f"data.partition.{option} {value!r}: data.dataset {dataset!r}"
    renamed = next((f for f, c in field_map.items() if c == value), None) if isinstance(field_map, Mapping) else None
    if renamed is not None:
        return f"{named}: data.field_map reads column {value!r} as {renamed!r}; name it {renamed!r}"
    return f"{named} has no such column (columns: {', '.join(source)})"


def too_few_keys_line(
    key: str, dataset: str, values: list[Any], num_clients: int, spellings: list[str] | None = None
) -> str:
    """The line refusing ``ByKey(key)`` over ``data.dataset`` whose ``values`` (distinct, sorted) are
    fewer than ``data.num_clients``: one client per value, so some client would get no row. Said by
    the precheck from a local file's rows and by the data module after the imports. ``spellings``: each
    value as the file spells it (a CSV cell typed as a number: ``007``, not 7; red team 17 B23)."""
    if spellings is None:
        shown = _listed(values, 5)
    else:
        shown = ", ".join(spellings[:5]) + (f" and {len(values) - 5} more" if len(values) > 5 else "")
    return (
        f"data.partition.key {key!r}: data.dataset {dataset!r} has {len(values)} distinct {key!r} value(s)"
        f" ({shown}), which cannot fill data.num_clients={num_clients} clients;"
        f" use num_clients <= {len(values)}"
    )


def grouped_keys_line(key: str, dataset: str, groups: list[list[Any]], private: bool = False) -> str:
    """The warning that ``ByKey(key)`` over ``data.dataset`` grouped more distinct values than clients:
    ``groups``, the values each client holds (red team 17 B20: four users into two clients, without a
    word). Names the values of the first clients, none in a ``private`` run (differential privacy)."""
    clients, count = len(groups), sum(len(g) for g in groups)
    held = "; ".join(f"client {c}: {_listed(g, 3)}" for c, g in enumerate(groups[:4]))
    held = "" if private else f" ({held}{'; ...' if clients > 4 else ''})"
    return (
        f"data.partition.key {key!r}: data.dataset {dataset!r} has {count} distinct {key!r} values for"
        f" data.num_clients={clients} clients, so they are grouped: value i in sorted order goes to client"
        f" i % {clients}{held}; set data.num_clients={count} for one client per value"
    )


def _listed(values: list[Any], most: int) -> str:
    """The first ``most`` of ``values``, then how many more."""
    more = f" and {len(values) - most} more" if len(values) > most else ""
    return ", ".join(repr(v) for v in values[:most]) + more


def missing_key_line(
    option: str,
    key: str,
    set_option: str,
    dataset: str,
    row: int,
    line: int | None,
    column: str | None = None,
    value: Any = None,
) -> str:
    """The line refusing row ``row`` of ``dataset`` (given as ``set_option``) whose ``value`` is no value
    (:func:`no_key_value`: missing or null, a text empty or of whitespace only, a NaN) in the column ``key`` the
    partition ``option`` (``data.partition.key``) assigns rows to clients by (red team 15 M2: after the
    imports, two lines naming neither the option nor the file): said by the precheck
    (:func:`lightning_fed.data_columns.data_columns_problem`, with the row's ``line`` in a JSON Lines file)
    and by the data module after the imports; a key read from another ``column`` (``data.field_map``) is
    named with it."""
    where = f"line {line} (row {row})" if line is not None else f"row {row}"
    how = "empty text" if isinstance(value, str) else "NaN" if value is not None else "missing or null"
    what = f"(column {column!r}: {how})" if column is not None else f"({how})"
    return f"{option} {key!r}: {set_option} {dataset!r}: {where} has no {key!r} value {what}"


def no_key_value(value: Any) -> bool:
    """Whether ``value`` is no client key: ``None`` (missing or null), a text empty or of whitespace only
    (red team 16 B3: a JSON ``""`` was a client key of its own while the same empty CSV cell, null to
    pandas, was refused) or a NaN (red team 17 B3: a Parquet float column's NaN, what pandas writes for a
    missing float, or a JSON ``NaN``, went to some client). Held by the precheck and by ``ByKey`` and the
    evaluation sets after the imports."""
    if isinstance(value, float):  # numpy's float64 too
        return value != value
    return value is None or (isinstance(value, str) and not value.strip())


def unheld_key_line(
    set_option: str, dataset: str, row: int, line: int | None, key: str, value: Any, training: list[Any]
) -> str:
    """The line refusing row ``row`` of the evaluation set ``dataset`` (given as ``set_option``) whose ``key``
    value no training client holds (``training``: the training set's values, distinct, sorted): ``ByKey``
    sends an evaluation row to the client of its value. Said by the precheck from local files and by the
    data module after the imports (red team 15 M3: two lines naming no file)."""
    where = f"line {line} (row {row})" if line is not None else f"row {row}"
    shown = ", ".join(repr(v) for v in training[:8]) + (", ..." if len(training) > 8 else "")
    return (
        f"{set_option} {dataset!r}: {where} has {key} {value!r}, which no training client holds"
        f" (training values: {shown})"
    )


def clients_per_round_problem(clients_per_round: Any, num_clients: Any) -> str | None:
    """``federation.clients_per_round`` above ``data.num_clients`` (a round samples without replacement)."""
    clients_per_round, num_clients = any_value(clients_per_round), any_value(num_clients)  # "4" is 4 to the parser
    if _integer(clients_per_round) and _integer(num_clients) and clients_per_round > num_clients:
        return f"federation.clients_per_round={clients_per_round} exceeds data.num_clients={num_clients}"
    return None
