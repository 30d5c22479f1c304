"""``ByKey``'s key values, refused in one line naming ``data.partition.key`` or the evaluation set's option,
the file and the row (its line in a JSON Lines file): before torch for a local file the precheck reads
(:mod:`lightning_fed.data_columns`), after the imports for one it does not (a folder), with the same words.

Red team 15 on f6ad729 (``od_tiny.yaml``: own_data on a tiny GPT-2, ``ByKey(user)``, ``field_map`` from
question/preferred/other):

- M2: a row without a ``user`` value got ``error: partition ByKey(key='user'): row 0 has no 'user' value``
  and the ``--debug`` hint, after 6.6 s of CPU, naming neither the option nor the file;
- M3: a ``data.val_dataset`` row whose user no training client holds got ``error: data.val_dataset: row 0
  has user 'zed', which no training client holds (training values: ...)`` and the hint, after the imports,
  naming no file;
- L1: a file without the key column got ``has no such column (columns: prompt, chosen, rejected)``: the
  names ``data.field_map`` reads its columns as, not the file's question/preferred/other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed, lightning_fed_without_torch
from tests.helpers.refusals import assert_config_refused_before_torch, shipped_config, write_config

USERS = ("ana", "ben", "ana", "ben")
FIELD_MAP = {"prompt": "question", "chosen": "preferred", "rejected": "other"}


def _rows(users: tuple[str | None, ...]) -> list[dict]:
    """One preference row per user (``None``: a null user)."""
    return [{"user": user, "question": f"q{i}", "preferred": "a", "other": "b"} for i, user in enumerate(users)]


def _write(path: Path, rows: list[dict]) -> Path:
    """``rows`` as JSON Lines, CSV (a null an empty cell) or Parquet, by ``path``'s suffix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        header = list(rows[0])
        lines = [",".join(header), *(",".join(row[k] or "" for k in header) for row in rows)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _config(dataset: Path, **init_args: object) -> dict:
    config = shipped_config("tiny")
    data = config["data"]["init_args"]
    data.pop("synthetic_args")
    data.update(
        dataset=str(dataset),
        field_map=FIELD_MAP,
        partition={"class_path": "lightning_fed.datamodules.ByKey", "init_args": {"key": "user"}},
        num_clients=2,
        batch_size=2,
        val_fraction=0.0,
    )
    data.update(init_args)
    config["federation"].update(rounds=1, local_steps=1)
    config["trainer"]["default_root_dir"] = "runs/tiny"
    return config


@pytest.mark.parametrize(
    ("name", "where"), [("train.jsonl", "line 3 (row 2)"), ("train.csv", "row 2"), ("train.parquet", "row 2")]
)
def test_a_training_row_without_its_key_value_is_one_line_before_torch(tmp_path, name, where):
    dataset = _write(tmp_path / "data" / name, _rows(("ana", "ben", None, "ben")))
    line = f"data.partition.key 'user': data.dataset {str(dataset)!r}: {where} has no 'user' value (missing or null)"
    assert_config_refused_before_torch(tmp_path, _config(dataset), line)


@pytest.mark.parametrize("args", [["plan"], ["fit", "--print_config"]], ids=["plan", "print_config"])
def test_a_row_without_its_key_is_refused_by_plan_and_print_config_too(tmp_path, args):
    """A row that lacks the key (a missing key reads as null) is said so by every command of the precheck."""
    rows = _rows(USERS)
    del rows[1]["user"]
    dataset = _write(tmp_path / "data" / "train.jsonl", rows)
    path = write_config(tmp_path, _config(dataset))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch(args[0], "--config", str(path), *args[1:], cwd=cwd, hook=tmp_path / "hook")
    line = f"data.partition.key 'user': data.dataset {str(dataset)!r}: line 2 (row 1) has no 'user' value"
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(path)!r}: {line} (missing or null)\n")
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("option", ["val_dataset", "test_dataset"])
def test_an_evaluation_value_no_training_client_holds_is_one_line_before_torch(tmp_path, option):
    dataset = _write(tmp_path / "data" / "train.jsonl", _rows(USERS))
    evaluation = _write(tmp_path / "data" / "eval.jsonl", _rows(("ben", "zed")))
    line = (
        f"data.{option} {str(evaluation)!r}: line 2 (row 1) has user 'zed', which no training client holds"
        " (training values: 'ana', 'ben')"
    )
    assert_config_refused_before_torch(tmp_path, _config(dataset, **{option: str(evaluation)}), line)


def test_an_evaluation_row_without_its_key_value_is_one_line_before_torch(tmp_path):
    dataset = _write(tmp_path / "data" / "train.jsonl", _rows(USERS))
    evaluation = _write(tmp_path / "data" / "test.csv", _rows(("ben", None)))
    line = (
        f"data.partition.key 'user': data.test_dataset {str(evaluation)!r}: row 1 has no 'user' value (missing or null)"
    )
    assert_config_refused_before_torch(tmp_path, _config(dataset, test_dataset=str(evaluation)), line)


def test_a_key_column_the_file_lacks_lists_the_file_s_own_columns(tmp_path):
    rows = [{k: v for k, v in row.items() if k != "user"} for row in _rows(USERS)]
    dataset = _write(tmp_path / "data" / "train.jsonl", rows)
    line = (
        f"data.partition.key 'user': data.dataset {str(dataset)!r} has no such column"
        " (columns: question, preferred, other)"
    )
    assert_config_refused_before_torch(tmp_path, _config(dataset), line)


def _refused_after_torch(tmp_path: Path, config: dict, line: str) -> None:
    """``fit`` exits 2 with ``error: LINE`` alone (no ``--debug`` hint), from an empty folder that stays empty.
    The child imports torch (about 7 s of CPU): a folder's rows are read by ``datasets`` only."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    path = write_config(tmp_path, config)
    proc = lightning_fed("fit", "--config", str(path), cwd=cwd)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n"), proc.stderr[-2000:]
    assert list(cwd.iterdir()) == []


def test_a_folder_s_row_without_its_key_value_is_one_line_after_torch(tmp_path):
    folder = tmp_path / "train"
    _write(folder / "part.jsonl", _rows(("ana", None, "ben", "ben")))
    line = f"data.partition.key 'user': data.dataset {str(folder)!r}: row 1 has no 'user' value (missing or null)"
    _refused_after_torch(tmp_path, _config(folder), line)


def test_a_folder_s_evaluation_value_no_training_client_holds_is_one_line_after_torch(tmp_path):
    dataset = _write(tmp_path / "data" / "train.jsonl", _rows(USERS))
    folder = tmp_path / "val"
    _write(folder / "part.jsonl", _rows(("zed",)))
    line = (
        f"data.val_dataset {str(folder)!r}: row 0 has user 'zed', which no training client holds"
        " (training values: 'ana', 'ben')"
    )
    _refused_after_torch(tmp_path, _config(dataset, val_dataset=str(folder)), line)


# Red team 16 B3 (bk.yaml: own_data, ByKey(user), field_map, 4 clients): a JSON Lines row with `"user": ""`
# trained (the empty text a client key of its own) while the same empty CSV cell (null to pandas) was
# refused; an empty or whitespace-only text is no value in every format, before torch and after.
@pytest.mark.parametrize(
    ("name", "user", "where"),
    [("train.jsonl", "", "line 3 (row 2)"), ("train.parquet", "", "row 2"), ("train.csv", "  ", "row 2")],
    ids=["jsonl", "parquet", "csv-spaces"],
)
def test_a_training_row_whose_key_is_empty_text_is_one_line_before_torch(tmp_path, name, user, where):
    dataset = _write(tmp_path / "data" / name, _rows(("ana", "ben", user, "ben")))
    line = f"data.partition.key 'user': data.dataset {str(dataset)!r}: {where} has no 'user' value (empty text)"
    assert_config_refused_before_torch(tmp_path, _config(dataset), line)


def test_an_evaluation_row_whose_key_is_empty_text_is_one_line_before_torch(tmp_path):
    dataset = _write(tmp_path / "data" / "train.jsonl", _rows(USERS))
    evaluation = _write(tmp_path / "data" / "val.jsonl", _rows(("ben", "")))
    line = (
        f"data.partition.key 'user': data.val_dataset {str(evaluation)!r}: line 2 (row 1) has no 'user' value"
        " (empty text)"
    )
    assert_config_refused_before_torch(tmp_path, _config(dataset, val_dataset=str(evaluation)), line)


def test_a_folder_s_row_whose_key_is_empty_text_is_one_line_after_torch(tmp_path):
    folder = tmp_path / "train"
    _write(folder / "part.jsonl", _rows(("ana", "", "ben", "ben")))
    line = f"data.partition.key 'user': data.dataset {str(folder)!r}: row 1 has no 'user' value (empty text)"
    _refused_after_torch(tmp_path, _config(folder), line)


def test_a_folder_s_evaluation_row_whose_key_is_empty_text_is_one_line_after_torch(tmp_path):
    dataset = _write(tmp_path / "data" / "train.jsonl", _rows(USERS))
    folder = tmp_path / "val"
    _write(folder / "part.jsonl", _rows(("ben", " ")))
    line = f"data.partition.key 'user': data.val_dataset {str(folder)!r}: row 1 has no 'user' value (empty text)"
    _refused_after_torch(tmp_path, _config(dataset, val_dataset=str(folder)), line)


# Red team 16 B4: an evaluation set without the key column was listed with field_map's names
# (`columns: prompt, chosen, rejected`), data.dataset with the file's own; now every set with its own.
@pytest.mark.parametrize(("option", "name"), [("val_dataset", "val.jsonl"), ("test_dataset", "test.csv")])
def test_an_evaluation_set_without_the_key_column_lists_its_own_columns_before_torch(tmp_path, option, name):
    dataset = _write(tmp_path / "data" / "train.jsonl", _rows(USERS))
    rows = [{k: v for k, v in row.items() if k != "user"} for row in _rows(("ben",))]
    evaluation = _write(tmp_path / "data" / name, rows)
    line = (
        f"data.{option} {str(evaluation)!r} has no column 'user' (data.partition.key) to assign its rows to clients"
        " by (columns: question, preferred, other)"
    )
    assert_config_refused_before_torch(tmp_path, _config(dataset, **{option: str(evaluation)}), line)


def test_a_folder_without_the_key_column_lists_its_own_columns_after_torch(tmp_path):
    dataset = _write(tmp_path / "data" / "train.jsonl", _rows(USERS))
    folder = tmp_path / "val"
    _write(folder / "part.jsonl", [{k: v for k, v in row.items() if k != "user"} for row in _rows(("ben",))])
    line = (
        f"data.val_dataset {str(folder)!r} has no column 'user' (data.partition.key) to assign its rows to clients"
        " by (columns: question, preferred, other)"
    )
    _refused_after_torch(tmp_path, _config(dataset, val_dataset=str(folder)), line)


# Red team 17 B3: a NaN key (a Parquet float column with NaN, what pandas writes for a missing float, or a
# JSON Lines `NaN`) was a client key: the row went to some client. A NaN is no value, before torch and after.
@pytest.mark.parametrize(
    ("name", "where"), [("train.jsonl", "line 3 (row 2)"), ("train.parquet", "row 2")], ids=["jsonl", "parquet"]
)
def test_a_training_row_whose_key_is_nan_is_one_line_before_torch(tmp_path, name, where):
    dataset = _write(tmp_path / "data" / name, _rows((1.0, 2.0, float("nan"), 2.0)))
    line = f"data.partition.key 'user': data.dataset {str(dataset)!r}: {where} has no 'user' value (NaN)"
    assert_config_refused_before_torch(tmp_path, _config(dataset), line)


def test_an_evaluation_row_whose_key_is_nan_is_one_line_before_torch(tmp_path):
    dataset = _write(tmp_path / "data" / "train.jsonl", _rows((1.0, 2.0, 1.0, 2.0)))
    evaluation = _write(tmp_path / "data" / "val.parquet", _rows((2.0, float("nan"))))
    line = f"data.partition.key 'user': data.val_dataset {str(evaluation)!r}: row 1 has no 'user' value (NaN)"
    assert_config_refused_before_torch(tmp_path, _config(dataset, val_dataset=str(evaluation)), line)


def test_a_folder_s_row_whose_key_is_nan_is_one_line_after_torch(tmp_path):
    folder = tmp_path / "train"
    _write(folder / "part.parquet", _rows((1.0, float("nan"), 2.0, 2.0)))
    line = f"data.partition.key 'user': data.dataset {str(folder)!r}: row 1 has no 'user' value (NaN)"
    _refused_after_torch(tmp_path, _config(folder), line)


# Red team 17 B8: a Parquet key column of a nested type (struct {n: <name>}) was refused only after the
# imports, in two lines naming neither the option nor the file (`values of 'user' cannot be sorted`).
@pytest.mark.parametrize(
    ("users", "arrow_type"),
    [([{"n": "ana"}, {"n": "ben"}], "struct<n: string>"), ([["ana"], ["ben"]], "list<element: string>")],
    ids=["struct", "list"],
)
def test_a_parquet_key_column_of_a_nested_type_is_one_line_before_torch(tmp_path, users, arrow_type):
    dataset = _write(tmp_path / "data" / "train.parquet", _rows((*users, *users)))
    line = (
        f"data.partition.key 'user': data.dataset {str(dataset)!r}: its 'user' column is of Parquet type {arrow_type};"
        " ByKey sorts its key values: text, numbers, booleans, dates or times, not a list, a struct or a map"
    )
    assert_config_refused_before_torch(tmp_path, _config(dataset), line)
