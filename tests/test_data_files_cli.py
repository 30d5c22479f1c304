"""A local data file (or folder) that ``datasets`` cannot read is refused before torch, in the line the
data source says after it (lightning_fed/data_files.py; issue 41, red team rows on the installed wheel:
each was refused after 10-15 s of imports, often in two lines, a CSV's unclosed quote as a missing field,
a UTF-8 file with a byte-order mark refused though ``datasets`` reads it)."""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lightning_fed.data_files import folder_problem
from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch
from tests.helpers.refusals import assert_refused_before_torch

GOOD = [{"user": f"u{i % 4}", "prompt": f"p{i}", "chosen": "a", "rejected": "b"} for i in range(4)]
HEADER = "user,prompt,chosen,rejected\n"
CSV = HEADER + "".join(f"{r['user']},{r['prompt']},a,b\n" for r in GOOD)


def _jsonl(*lines: object) -> str:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


def _parquet_bytes(tmp_path: Path) -> bytes:
    pq.write_table(pa.Table.from_pylist(GOOD), tmp_path / "good.parquet")
    return (tmp_path / "good.parquet").read_bytes()


UTF16 = " is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8"
NOT_PARQUET = (
    " is not a Parquet file pyarrow reads (Parquet magic bytes not found in footer. Either the file is corrupted"
    " or this is not a parquet file.)"
)
NOT_OBJECT = ", expected a JSON object"
LATIN1 = _jsonl(GOOD[0]).encode() + b'{"p": "caf\xe9"}\n'  # column 11: the byte after `{"p": "caf`
# name -> (file name, its bytes (or a function of tmp_path), the problem said after `data.dataset '<file>'`)
CASES = {
    "jsonl_array_line": ("d.jsonl", _jsonl(*GOOD[:3], "[1, 2]"), ": line 4 (row 3) is an array" + NOT_OBJECT),
    "jsonl_string_line": ("d.jsonl", _jsonl(GOOD[0], "", '"text"'), ": line 3 (row 1) is a string" + NOT_OBJECT),
    "jsonl_number_line": ("d.jsonl", _jsonl("3", *GOOD), ": line 1 (row 0) is a number" + NOT_OBJECT),
    "jsonl_null_line": ("d.jsonl", _jsonl(*GOOD, "null"), ": line 5 (row 4) is null" + NOT_OBJECT),
    "jsonl_null_first": ("d.jsonl", _jsonl("", "null", *GOOD), ": line 2 (row 0) is null" + NOT_OBJECT),
    "jsonl_empty_objects": ("d.jsonl", _jsonl({}, {}), " holds no rows (every object is empty)"),
    "json_string": ("d.json", '"hello"', ": line 1 (row 0) is a string" + NOT_OBJECT),
    "json_array_item": ("d.json", json.dumps([*GOOD, 3]), ": item 4 (row 4) is a number" + NOT_OBJECT),
    "json_empty_array": ("d.json", "[]", " holds no rows (an empty JSON array)"),
    "latin1": ("d.jsonl", LATIN1, ": line 2 is not UTF-8 (byte 0xe9 at column 11); save it as UTF-8"),
    "utf16": ("d.jsonl", _jsonl(*GOOD).encode("utf-16"), UTF16),
    "csv_utf16": ("d.csv", CSV.encode("utf-16"), UTF16),
    "csv_long_row": ("d.csv", CSV + "u0,p9,a,b,c\nu1,p10,a,b\n", ": line 6 (row 4) has 5 cells, the header 4"),
    "csv_open_quote": ("d.csv", CSV + 'u0,"p9,a\nu1,p10,a,b\n', ": line 6 (row 4) opens a quote that is never closed"),
    "csv_header_only": ("d.csv", HEADER, " holds a header and no rows"),
    "csv_header_and_spaces": ("d.csv", HEADER + "   \n\n", " holds a header and no rows"),
    "empty": ("d.jsonl", "", " holds no rows (the file is empty)"),
    "unicode_blank": ("d.jsonl", "\u00a0\n", " holds no rows (only blank lines)"),
    "blank_lines": ("d.jsonl", "\n  \n\n", " holds no rows (the file is empty or only blank lines)"),
    "parquet_of_text": ("d.parquet", "prompt,chosen\n", NOT_PARQUET),
    "parquet_truncated": ("d.parquet", lambda tmp: _parquet_bytes(tmp)[:-100], NOT_PARQUET),
}  # fmt: skip


def _fit(path: Path) -> list[str]:
    """``fit --config own_data`` on ``path`` (its own columns, no test file)."""
    return ["fit", "--config", "own_data", f"--data.dataset={path}", "--data.init_args.field_map=null"] + [
        "--data.init_args.test_dataset=null"
    ]


def _write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / "data" / name
    path.parent.mkdir(exist_ok=True)
    data = data(tmp_path) if callable(data) else data
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


@pytest.mark.parametrize("case", CASES)
def test_a_file_datasets_cannot_read_is_one_line_before_torch(tmp_path, case):
    name, data, problem = CASES[case]
    path = _write(tmp_path, name, data)
    assert_refused_before_torch(tmp_path, _fit(path), f"data.dataset {str(path)!r}{problem}")


def test_a_folder_is_checked_file_by_file_before_torch(tmp_path):
    folder = tmp_path / "data"
    _write(tmp_path, "a.jsonl", _jsonl(*GOOD))
    _write(tmp_path, "b.jsonl", _jsonl(GOOD[0], [1]))
    line = (
        f"data.dataset {str(folder)!r}: {str(folder / 'b.jsonl')!r}: line 2 (row 1) is an array, expected a JSON object"
    )
    assert_refused_before_torch(tmp_path, _fit(folder), line)


def test_a_folder_without_data_files_says_what_it_holds(tmp_path):
    folder = tmp_path / "data"
    _write(tmp_path, "notes.txt", "hi")
    (folder / "old").mkdir()
    line = (
        f"data.dataset {str(folder)!r} is a folder holding no .json/.jsonl/.csv/.parquet file (notes.txt, old/);"
        " give a data file, or a folder of data files of one format"
    )
    assert_refused_before_torch(tmp_path, _fit(folder), line)


@pytest.mark.parametrize("option", ["dataset", "test_dataset"])
def test_a_folder_whose_data_file_is_a_fifo_names_it_as_no_regular_file(tmp_path, option):
    """Red team 15 L5: on f6ad729 the line said the folder held no .jsonl file and named ``part.jsonl`` in
    the same breath. Said from ``stat`` alone: the FIFO has no writer, so opening it would block the child;
    the data source says the same line after the imports (both call data_files.folder_problem)."""
    folder = tmp_path / "parts"
    folder.mkdir()
    os.mkfifo(folder / "part.jsonl")
    (folder / "old").mkdir()
    args = _fit(folder)
    if option == "test_dataset":
        args = [*_fit(_write(tmp_path, "train.jsonl", _jsonl(*GOOD)))[:-1], f"--data.init_args.test_dataset={folder}"]
    line = (
        f"data.{option} {str(folder)!r} is a folder holding no .json/.jsonl/.csv/.parquet file"
        " (old/, part.jsonl (a FIFO, not a regular file)); give a data file, or a folder of data files of one format"
    )
    assert_refused_before_torch(tmp_path, args, line)


STRAY = "; a data folder holds only .json/.jsonl/.csv/.parquet files of one format (move it out of the folder)"


@pytest.mark.parametrize("option", ["dataset", "test_dataset"])
@pytest.mark.parametrize("entry", ["fifo", "device"])
def test_a_folder_holding_a_fifo_or_a_device_beside_its_data_is_refused_before_torch(tmp_path, option, entry):
    """Red team B01: a FIFO or a symlink to a device beside a good ``.jsonl`` was skipped without a word
    (``folder_files`` kept regular files only) and the run trained on the rest. Said from ``stat`` alone:
    the FIFO has no writer, so opening it would block the child."""
    folder = tmp_path / "data"
    _write(tmp_path, "a.jsonl", _jsonl(*GOOD))
    if entry == "fifo":
        os.mkfifo(folder / "b.jsonl")
        kind = "a FIFO"
    else:
        (folder / "b.jsonl").symlink_to(os.devnull)
        kind = f"a symlink to a character device {os.devnull}"
    args = _fit(folder)
    if option == "test_dataset":
        train = tmp_path / "train.jsonl"
        train.write_text(_jsonl(*GOOD), encoding="utf-8")
        args = [*_fit(train)[:-1], f"--data.init_args.test_dataset={folder}"]
    line = f"data.{option} {str(folder)!r} holds 'b.jsonl', {kind}, not a regular data file (never opened){STRAY}"
    assert_refused_before_torch(tmp_path, args, line)


def test_a_folder_holding_a_file_of_another_type_beside_its_data_is_refused_before_torch(tmp_path):
    """Red team L5: ``notes.txt`` beside a good ``.jsonl`` was left out without a word (own-data.md: a
    folder holds files of one of the four formats). A hidden file (``.DS_Store``) and a subfolder are not
    read and not refused."""
    folder = tmp_path / "data"
    _write(tmp_path, "a.jsonl", _jsonl(*GOOD))
    _write(tmp_path, "notes.txt", "hi")
    _write(tmp_path, ".DS_Store", "x")
    (folder / "old").mkdir()
    line = f"data.dataset {str(folder)!r} holds 'notes.txt', a file of unsupported type '.txt'{STRAY}"
    assert_refused_before_torch(tmp_path, _fit(folder), line)
    (folder / "notes.txt").unlink()
    assert folder_problem(folder) is None


def test_an_evaluation_file_is_named_as_itself(tmp_path):
    good = _write(tmp_path, "train.jsonl", _jsonl(*GOOD))
    test = _write(tmp_path, "test.jsonl", _jsonl(GOOD[0], "null", "[]"))
    args = [*_fit(good)[:-1], f"--data.init_args.test_dataset={test}"]
    line = f"data.test_dataset {str(test)!r}: line 2 (row 1) is null, expected a JSON object"
    assert_refused_before_torch(tmp_path, args, line)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("bom.jsonl", codecs.BOM_UTF8 + _jsonl(*GOOD).encode()),
        ("bom.json", codecs.BOM_UTF8 + json.dumps(GOOD).encode()),
        ("bom.csv", codecs.BOM_UTF8 + CSV.encode()),
        ("keys.jsonl", _jsonl(*GOOD[:2], {**GOOD[2], "extra": "x"}, GOOD[3])),
    ],
)
def test_what_datasets_reads_passes_the_precheck(tmp_path, name, data):
    """A UTF-8 byte-order mark (``datasets`` drops it; on 3df2116 the precheck refused a JSON Lines file
    with one: ``line 1 (row 0) is not valid JSON: Unexpected UTF-8 BOM``), rows with different keys: on
    to the live parser (torch)."""
    path = _write(tmp_path, name, data)
    proc = lightning_fed_without_torch(*_fit(path), cwd=tmp_path, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr, proc.stderr


def test_the_reader_says_the_precheck_line(tmp_path):
    """The data source (any size, after the imports) says the same lines."""
    from lightning_fed.datamodules.sources import load_records
    from lightning_fed.errors import UserError

    for case in (
        "jsonl_array_line",
        "jsonl_null_first",
        "csv_open_quote",
        "csv_header_only",
        "utf16",
        "parquet_of_text",
    ):
        name, data, problem = CASES[case]
        path = _write(tmp_path, name, data)
        with pytest.raises(UserError) as caught:
            load_records(str(path), "preference")
        assert str(caught.value) == f"data.dataset {str(path)!r}{problem}", case
        path.unlink()
    for name, data in [
        ("bom.jsonl", codecs.BOM_UTF8 + _jsonl(*GOOD).encode()),
        ("bom.csv", codecs.BOM_UTF8 + CSV.encode()),
    ]:
        assert len(load_records(str(_write(tmp_path, name, data)), "preference")) == len(GOOD)


def test_json_nested_past_pythons_limit_is_left_to_the_reader(tmp_path):
    """100000 nested arrays: on 3df2116 the precheck itself failed, 'error: RecursionError: maximum
    recursion depth exceeded while decoding a JSON array from a unicode string' and the --debug hint; the
    reader says it in one line ('cannot read ... as json: Reached object decoding depth limit ...')."""
    path = _write(tmp_path, "deep.json", "[" * 100000 + "]" * 100000)
    proc = lightning_fed_without_torch(*_fit(path), cwd=tmp_path, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr, proc.stderr
