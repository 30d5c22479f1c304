"""What a local data file (or folder of them) must be for ``datasets`` to read it at all, said
before torch is imported (issue 41, "Nothing lost, nothing late").

``data.dataset`` (``val_dataset``, ``test_dataset``) given as a local file that is empty, not
UTF-8, a JSON Lines line that is JSON but no object (``[1, 2]``, ``"text"``, ``3``), a ``.json``
file whose top level is a string or a number, a CSV row with more cells than its header or a
quote never closed, a header only, a ``.parquet`` file that is not Parquet, or a folder holding
no data file: each was refused by the data source after the imports (10-15 s of CPU, often in two
lines), or, for a CSV, with a line that named the wrong problem. The precheck
(:func:`lightning_fed.data_columns.data_columns_problem`) and the data source
(:func:`lightning_fed.datamodules.sources.load_local`) say each with the same line, from here.

What ``datasets`` reads is not refused: a UTF-8 byte-order mark (JSON, JSON Lines and CSV), rows
with different keys, a ``.json`` file holding one object or a list of strings (read as a ``text``
column). A ``null`` line is refused (a row without fields to ``datasets``, which crashes on a file
that starts with one). Imports nothing but the standard library (pyarrow, which imports no torch,
for a Parquet file).
"""

from __future__ import annotations

import codecs
import csv
import json
from pathlib import Path

from lightning_fed.data_cross_rules import MAX_SCANNED_BYTES, bad_json_line, csv_blank, text_column_array
from lightning_fed.data_paths import LOCAL_FORMATS
from lightning_fed.path_kinds import not_a_file

TEXT_FORMATS = (".json", ".jsonl", ".csv")
_JSON_KINDS = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}


def json_kind(value: object) -> str:
    """What a JSON value is, in JSON's words (``an array``, ``a string``, ``null``...)."""
    return "null" if value is None else _JSON_KINDS.get(type(value), "an object")


def text_problem(path: Path) -> str | None:
    """Where the text file ``path`` is not what ``datasets``' JSON and CSV readers take: empty or only
    blank lines, UTF-16 (a byte-order mark), a line that is not UTF-8 (its byte and column; pyarrow's
    JSON reader takes such bytes and fails later without a line). A UTF-8 byte-order mark is read."""
    with open(path, "rb") as handle:
        head = handle.read(4)
        if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            return "is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8"
        handle.seek(len(codecs.BOM_UTF8) if head.startswith(codecs.BOM_UTF8) else 0)
        blank = True
        for number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as err:
                where = f"byte {line[err.start]:#04x} at column {err.start + 1}"
                return f"line {number} is not UTF-8 ({where}); save it as UTF-8"
            blank = blank and not line.strip()
    return "holds no rows (the file is empty or only blank lines)" if blank else None


def json_shape_problem(path: Path) -> str | None:
    """Where the UTF-8 JSON or JSON Lines file ``path`` is no list of rows as ``datasets`` reads it: a
    line that is not JSON (:func:`~lightning_fed.data_cross_rules.bad_json_line`), a line that is an
    array, a string, a number or a boolean, a top level of one of those, an empty array, an array of
    objects with an item that is none. An array whose start holds no ``{`` is read as a ``text``
    column (``datasets``' JSON builder), one object as one row. A ``null`` line is refused: ``datasets``
    reads it as a row of nulls (no record's fields; pyarrow crashes, exit 139, on a file that starts so)."""
    text = path.read_text(encoding="utf-8-sig")
    if (bad := bad_json_line(path)) is not None:
        return bad
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:  # JSON Lines: every line is JSON (bad_json_line)
        whole = None
    else:
        if isinstance(whole, list):
            if not whole:
                return "holds no rows (an empty JSON array)"
            if text_column_array(text):
                return None  # a list of strings (or numbers): datasets reads a `text` column (missing fields)
            bad = next((i for i, item in enumerate(whole) if not isinstance(item, dict)), None)
            if bad is not None:
                return f"item {bad} (row {bad}) is {json_kind(whole[bad])}, expected a JSON object"
            return None if any(whole) else "holds no rows (every object is empty)"
        if isinstance(whole, dict):
            return None if whole else "holds no rows (every object is empty)"  # one object: one row
    row, fields = 0, False  # JSON Lines, or one string, number or boolean (said as the line it is on)
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        value = json.loads(line)
        if not isinstance(
            value, dict
        ):  # a null: a row of nulls, none of a record's fields (pyarrow crashes on a first one)
            return f"line {number} (row {row}) is {json_kind(value)}, expected a JSON object"
        fields = fields or bool(value)
        row += 1
    if row == 0:
        return "holds no rows (only blank lines)"
    return None if fields else "holds no rows (every object is empty)"


def csv_shape_problem(path: Path) -> str | None:
    """Where the UTF-8 CSV file ``path`` is not what pandas' ``read_csv`` (``datasets``' CSV reader)
    takes: a quote never closed (pandas: ``EOF inside string``), a row with more cells than the header
    (``Expected 4 fields in line 8, saw 5``; a first row of one more is read with an index, as pandas
    does), a header and no row (``corresponds to no data``)."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, strict=True)
        header, width, row, start = None, None, 0, 1
        try:
            for cells in reader:
                if csv_blank(cells):
                    pass
                elif header is None:
                    header = cells
                else:
                    width = width or max(len(header), len(cells) if len(cells) == len(header) + 1 else 0)
                    if len(cells) > width:
                        return f"line {start} (row {row}) has {len(cells)} cells, the header {len(header)}"
                    row += 1
                start = reader.line_num + 1
        except csv.Error as err:
            if "unexpected end of data" not in str(err):
                return None  # pandas is laxer than the strict reader: the reader's to say
            return f"line {start} (row {row}) opens a quote that is never closed"
    return "holds a header and no rows" if header is not None and row == 0 else None


def parquet_problem(path: Path) -> str | None:
    """Where ``path`` is not a Parquet file pyarrow reads (its footer), or holds no rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # no torch (tests/test_data_model_options_cli.py)

    try:
        rows = pq.read_metadata(path).num_rows
    except (OSError, pa.ArrowException) as err:  # pyarrow's reason is what to fix (a bug of ours is raised)
        return f"is not a Parquet file pyarrow reads ({' '.join(str(err).split())})"
    return "holds no rows" if rows == 0 else None


def read_problem(path: Path) -> str | None:
    """What stops the reader before it parses the local data file ``path``: no bytes, a Parquet footer
    pyarrow cannot read, a text file that is not UTF-8 (:func:`text_problem`); cheap on any size."""
    suffix = path.suffix.lower()
    if path.stat().st_size == 0:
        return "holds no rows (the file is empty)"
    if suffix == ".parquet":
        return parquet_problem(path)
    if suffix not in TEXT_FORMATS:
        return None
    if (problem := text_problem(path)) or suffix == ".csv":
        return problem
    with open(path, encoding="utf-8-sig") as handle:  # pyarrow crashes (exit 139) on a first line `null`
        number, first = next(((n, line) for n, line in enumerate(handle, start=1) if line.strip()), (0, ""))
    return f"line {number} (row 0) is null, expected a JSON object" if first.strip() == "null" else None


def shape_problem(path: Path) -> str | None:
    """Where the UTF-8 CSV, JSON or JSON Lines file ``path`` holds no rows ``datasets`` reads
    (:func:`csv_shape_problem`, :func:`json_shape_problem`); parses the whole file."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return csv_shape_problem(path)
    try:
        return json_shape_problem(path) if suffix in (".json", ".jsonl") else None
    except RecursionError:  # nested deeper than Python's json reads: the reader's to say
        return None


def file_problem(path: Path) -> str | None:
    """:func:`read_problem`, then :func:`shape_problem` of a file up to
    :data:`~lightning_fed.data_cross_rules.MAX_SCANNED_BYTES` (a larger one is the reader's to parse)."""
    if problem := read_problem(path):
        return problem
    return shape_problem(path) if path.stat().st_size <= MAX_SCANNED_BYTES else None


def folder_files(folder: Path) -> list[Path]:
    """The data files of ``folder`` that ``datasets`` reads (by suffix, :data:`LOCAL_FORMATS`), sorted."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in LOCAL_FORMATS)


def _held(entry: Path) -> str:
    """How :func:`folder_problem` shows an entry of a folder: a folder with a ``/``, a data file's name that
    is no regular file (a FIFO, a device) with what it is, from ``stat`` alone (red team 15 L5)."""
    if entry.is_dir():
        return entry.name + "/"
    kind = not_a_file(entry) if entry.suffix.lower() in LOCAL_FORMATS else None
    return f"{entry.name} ({kind}, not a regular file)" if kind else entry.name


def stray_entry(folder: Path) -> str | None:
    """The first entry (by name) of the data folder ``folder`` that is not one of its data files: a FIFO, a
    socket, a device or a symlink to one, said from ``stat`` alone (a FIFO is never opened; red team B01),
    or a regular file of another suffix (``notes.txt``, red team L5: own-data.md says a folder holds data
    files). :func:`folder_files` leaves either out, so the run trained on the rest without a word. Not
    refused, and not read: a subfolder, and a hidden file (``.DS_Store``, ``.gitkeep``) of no data suffix."""
    for entry in sorted(folder.iterdir()):
        suffix = entry.suffix.lower()
        if entry.is_dir() or (entry.name.startswith(".") and suffix not in LOCAL_FORMATS):
            continue
        if kind := not_a_file(entry):
            return f"{entry.name!r}, {kind}, not a regular data file (never opened)"
        if suffix not in LOCAL_FORMATS:
            return f"{entry.name!r}, a file of unsupported type {suffix or '(no suffix)'!r}"
    return None


def folder_problem(folder: Path) -> str | None:
    """Where the folder ``folder`` is no data set: no data file (what it holds instead: a data file's name
    that is a FIFO or a device is said to be one, never opened), files of more than one format, or an entry
    that is no data file (:func:`stray_entry`)."""
    files = folder_files(folder)
    if not files:
        held = sorted(_held(p) for p in folder.iterdir())
        shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "") if held else "nothing"
        return (
            f"is a folder holding no {'/'.join(LOCAL_FORMATS)} file ({shown}); give a data file, or a folder"
            " of data files of one format"
        )
    builders = sorted({LOCAL_FORMATS[p.suffix.lower()] for p in files})
    if len(builders) > 1:
        return f"is a folder that mixes formats {builders}; keep one"
    if stray := stray_entry(folder):
        return (
            f"holds {stray}; a data folder holds only {'/'.join(LOCAL_FORMATS)} files of one format (move it out"
            " of the folder)"
        )
    return None


def local_data_problem(option: str, dataset: object) -> str | None:
    """The line refusing ``option``'s local file or folder ``dataset`` that ``datasets`` cannot read as
    a data set (:func:`folder_problem`, :func:`file_problem` of each file, naming the file of a
    folder), or ``None`` (not a local file or folder, or nothing found)."""
    if not isinstance(dataset, str) or not dataset.strip():
        return None  # no name at all: data_paths.dataset_text_problem says so
    path = Path(dataset).expanduser()
    try:
        if path.is_dir():
            if problem := folder_problem(path):
                return said(f"{option} {dataset!r}", problem)
            for file in folder_files(path):
                if problem := file_problem(file):
                    return said(f"{option} {dataset!r}: {str(file)!r}", problem)
            return None
        if not path.is_file() or path.suffix.lower() not in LOCAL_FORMATS:
            return None
        problem = file_problem(path)
    except OSError:
        return None  # unreadable: the reader's to say
    return said(f"{option} {dataset!r}", problem) if problem else None


def said(subject: str, problem: str) -> str:
    """``subject`` (an option and its file) and ``problem``: ``data.dataset 'a.jsonl': line 3 (row 2) ...``
    for a place in the file, ``data.dataset 'a.jsonl' is UTF-16 ...`` for the whole file."""
    return f"{subject}: {problem}" if problem.startswith(("line ", "item ", "not valid")) else f"{subject} {problem}"
