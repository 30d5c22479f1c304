"""The neighbours of lightning_fed/data_files.py (issue 41, outside red team 14's rows): a data file the
run cannot use, refused before torch in one line naming the option it came from (``data.dataset``,
``data.val_dataset``, ``data.test_dataset``), the file and what is wrong; exit 2, nothing written. On
08c1cba each was refused only after the imports (15-20 s of CPU, often in two lines, a test or
validation file named ``data.dataset``) and ``fit --print_config`` and ``plan`` took it (exit 0)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from lightning_fed.data_paths import SUPPORTED
from tests.helpers.refusals import assert_refused_before_torch, shipped_config, write_config

NOT_TEXT = ": field 'prompt' must be text; row 0 has {}"
MISSING_PROMPT = ": missing field 'prompt' (columns: text; map it with data.field_map)"
GOOD = [
    {"user": f"u{i % 4}", "prompt": f"p{i}", "chosen": "a", "rejected": "b", "question": f"q{i}", "preferred": "a"}
    | {"other": "b"}
    for i in range(4)
]
MAPPED_JSONL = "".join(json.dumps(row) + "\n" for row in [GOOD[0], {**GOOD[1], "question": 3}])
MAPPED_CSV = "user,question,preferred,other\nu0,q,a,b\nu1,q,a,\n"


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _parquet(path: Path) -> None:
    pq.write_table(pa.Table.from_pylist([{**row, "prompt": i} for i, row in enumerate(GOOD)]), path)


# name -> (file name, its text or a function making it at a path, the problem said after `<option> '<file>'`)
CASES = {
    "txt": ("d.txt", "prompt,chosen\n", f": unsupported file type '.txt'; {SUPPORTED}"),
    "no_suffix": ("d", "{}\n", f": unsupported file type '(no suffix)'; {SUPPORTED}"),
    "fifo": ("d.jsonl", _fifo, f" is not a regular file (a device, FIFO or socket); {SUPPORTED}"),
    # datasets reads an array without objects as one `text` column (M4)
    "json_strings": ("d.json", '["a", "b"]', MISSING_PROMPT),
    "json_numbers": ("d.json", "[1, 2.5]", MISSING_PROMPT),
    # a column pandas types as numbers (M5's CSV neighbour), a Parquet column of ints (M5)
    "csv_numbers": ("d.csv", "user,prompt,chosen,rejected\nu0,1,a,b\nu1,2,a,b\n", NOT_TEXT.format(1)),
    "csv_numbers_and_na": ("d.csv", "user,prompt,chosen,rejected\nu0,7,a,b\nu1,NA,a,b\n", NOT_TEXT.format(7.0)),
    "parquet_ints": ("d.parquet", _parquet, NOT_TEXT.format(0)),
    # a field read from the user's own column (data.field_map) is named with that column (LOW)
    "mapped_not_text": (
        "d.jsonl",
        MAPPED_JSONL,
        ": field 'prompt' (column 'question') must be text; line 2 (row 1) has 3",
    ),
    "mapped_blank": ("d.csv", MAPPED_CSV, ": row 1 has no 'rejected' (column 'other': missing or null)"),
}
NO_KEY = {"partition": None, "group_key": None}
"""Options of own_data that need a ``user`` column: left out where the file has none, so that the line is
the data module's first (the partition's key is refused first otherwise, before torch as before)."""
FIELD_MAP = {"field_map": {"prompt": "question", "chosen": "preferred", "rejected": "other"}}
"""own_data's own map."""
OPTIONS = {"json_strings": NO_KEY, "json_numbers": NO_KEY, "mapped_not_text": FIELD_MAP, "mapped_blank": FIELD_MAP}


def _write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / "data" / name
    path.parent.mkdir(exist_ok=True)
    if callable(data):
        data(path)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def _good(tmp_path: Path) -> Path:
    return _write(tmp_path, "good.jsonl", "".join(json.dumps(row) + "\n" for row in GOOD))


def _data(tmp_path: Path, option: str, path: Path, case: str) -> dict:
    """own_data's data options on ``path`` as ``option``, the others on a good file, no field map."""
    good = str(_good(tmp_path))
    return {"dataset": good, "field_map": None, "test_dataset": None, **OPTIONS.get(case, {}), option: str(path)}


@pytest.mark.parametrize("option", ["dataset", "val_dataset", "test_dataset"])
@pytest.mark.parametrize("case", CASES)
def test_a_data_file_no_reader_takes_is_one_line_before_torch(tmp_path, case, option):
    name, data, problem = CASES[case]
    path = _write(tmp_path, name, data)
    args = [f"--data.init_args.{key}={value}" for key, value in _data(tmp_path, option, path, case).items()]
    args = [arg.replace("=None", "=null") for arg in args]
    assert_refused_before_torch(
        tmp_path, ["fit", "--config", "own_data", *args], f"data.{option} {str(path)!r}{problem}"
    )


@pytest.mark.parametrize("command", [["plan"], ["fit", "--print_config"]])
@pytest.mark.parametrize("case", CASES)
def test_print_config_and_plan_refuse_it_as_fit(tmp_path, case, command):
    """H4 (red team 14): what fit refuses of the data file, ``--print_config`` and ``plan`` refuse too."""
    name, data, problem = CASES[case]
    path = _write(tmp_path, name, data)
    config = shipped_config("own_data")
    config["data"]["init_args"].update(_data(tmp_path, "dataset", path, case))
    file = write_config(tmp_path, config)
    line = f"data.dataset {str(path)!r}{problem}"
    assert_refused_before_torch(tmp_path, [*command, "--config", str(file)], line, config_file=file)
    assert yaml.safe_load(file.read_text(encoding="utf-8")) == config


@pytest.mark.parametrize("case", CASES)
def test_the_reader_says_the_precheck_line(tmp_path, case):
    """The data source (after the imports, from Python) says the same line, one line (a user error)."""
    from lightning_fed.datamodules.sources import load_records
    from lightning_fed.errors import UserError

    name, data, problem = CASES[case]
    path = _write(tmp_path, name, data)
    with pytest.raises(UserError) as caught:
        load_records(str(path), "preference", field_map=OPTIONS.get(case, {}).get("field_map"))
    assert str(caught.value) == f"data.dataset {str(path)!r}{problem}"


def test_a_field_map_naming_one_column_twice_is_one_line_before_torch(tmp_path):
    """On 08c1cba after the imports (15 s of CPU), in two lines (the --debug hint)."""
    from lightning_fed.datamodules.sources import load_records
    from lightning_fed.errors import UserError

    path = _good(tmp_path)
    field_map = {"prompt": "question", "chosen": "question", "rejected": "other"}
    args = [f"--data.init_args.dataset={path}", "--data.init_args.test_dataset=null"]
    line = "data.field_map: 'prompt' and 'chosen' both map to column 'question'"
    assert_refused_before_torch(
        tmp_path, ["fit", "--config", "own_data", *args, f"--data.init_args.field_map={field_map}"], line
    )
    with pytest.raises(UserError) as caught:
        load_records(str(path), "preference", field_map=field_map)
    assert str(caught.value) == line
