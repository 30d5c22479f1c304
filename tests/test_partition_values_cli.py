"""``data.partition``'s values in a local file refused before torch, in one line naming the option, the
file and the value (:mod:`lightning_fed.partition_values`, red team 15 B09 and B10).

On f05487a a ``ByColumn`` column with fewer distinct values than clients printed ``error: partition
ByColumn(column='client'): client 2 got no examples`` and the ``--debug`` hint after the imports; a
client id out of range ``... row 2 has client 5, not an integer in 0..1`` likewise. A ``ByKey`` column
mixing ``1`` and ``"1"`` passed the early count, then training read both as the one key ``'1'``.
The children cannot import torch (``tests/helpers/cli.py``) and run in an empty folder that stays empty.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch
from tests.helpers.refusals import assert_config_refused_before_torch, shipped_config, write_config


def _rows(folder: Path, column: str, values: list, suffix: str = ".jsonl") -> Path:
    """A preference file of one row per value of ``column`` (``question``/``preferred``/``other`` text)."""
    rows = [{"question": f"q{i}", "preferred": "a", "other": "b", column: v} for i, v in enumerate(values)]
    path = folder / f"train{suffix}"
    if suffix == ".csv":
        header = list(rows[0])
        path.write_text("\n".join([",".join(header), *(",".join(str(r[k]) for k in header) for r in rows)]) + "\n")
    elif suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _config(data_file: Path, partition: dict, num_clients: int) -> dict:
    config = shipped_config("tiny")
    data = config["data"]["init_args"]
    data.pop("synthetic_args")
    data.update(
        dataset=str(data_file),
        field_map={"prompt": "question", "chosen": "preferred", "rejected": "other"},
        partition=partition,
        num_clients=num_clients,
        batch_size=2,
        val_fraction=0.0,
    )
    config["federation"].update(rounds=1, local_steps=1)
    config["trainer"]["default_root_dir"] = "runs/tiny"
    return config


BY_COLUMN = {"class_path": "lightning_fed.datamodules.ByColumn"}
BY_USER = {"class_path": "lightning_fed.datamodules.ByKey", "init_args": {"key": "user"}}


def _goes_on(tmp_path: Path, config: dict) -> None:
    """The child passes every check made before torch (it reaches the torch import)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    path = write_config(tmp_path, config)
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=cwd, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_by_column_with_fewer_values_than_clients_is_one_line_before_torch(tmp_path, suffix):
    data_file = _rows(tmp_path, "client", [0, 0, 1, 1], suffix)
    line = (
        f"data.partition.column 'client': data.dataset {str(data_file)!r} has 2 distinct 'client' value(s)"
        " (0, 1); ByColumn needs a row for each client id 0..3 (data.num_clients=4; no row has 2, 3)"
    )
    assert_config_refused_before_torch(tmp_path, _config(data_file, BY_COLUMN, 4), line)


@pytest.mark.parametrize(("value", "where"), [(5, "line 3 (row 2)"), (-1, "line 3 (row 2)"), (1.5, "line 3 (row 2)")])
def test_a_by_column_client_id_out_of_range_is_one_line_before_torch(tmp_path, value, where):
    data_file = _rows(tmp_path, "client", [0, 1, value, 1])
    line = (
        f"data.partition.column 'client': data.dataset {str(data_file)!r}: {where} has 'client' {value!r};"
        " ByColumn needs a client id in 0..1 (data.num_clients=2)"
    )
    assert_config_refused_before_torch(tmp_path, _config(data_file, BY_COLUMN, 2), line)


def test_a_by_column_client_id_out_of_range_in_a_csv_file_names_its_row(tmp_path):
    data_file = _rows(tmp_path, "group", [0, 1, 1, 2], ".csv")
    partition = {"class_path": "ByColumn", "init_args": {"column": "group"}}
    line = (
        f"data.partition.column 'group': data.dataset {str(data_file)!r}: row 3 has 'group' 2;"
        " ByColumn needs a client id in 0..1 (data.num_clients=2)"
    )
    assert_config_refused_before_torch(tmp_path, _config(data_file, partition, 2), line)


def test_by_column_with_a_row_for_every_client_goes_on(tmp_path):
    _goes_on(tmp_path, _config(_rows(tmp_path, "client", [0, 1, 2, 1]), BY_COLUMN, 3))


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_by_key_values_1_and_text_1_are_one_line_naming_both_spellings(tmp_path, suffix):
    """``datasets`` reads a column mixing ``1`` and ``"1"`` as JSON text ``'1'`` for both: training's one key."""
    data_file = _rows(tmp_path, "user", [1, 1, "1", "2"], suffix)
    where = ("line 3 (row 2)", "line 1 (row 0)") if suffix == ".jsonl" else ("row 2", "row 0")
    line = (
        f"data.partition.key 'user': data.dataset {str(data_file)!r}: {where[0]} has 'user' \"1\" (text) and"
        f" {where[1]} has 'user' 1 (a number); ByKey reads both as the one client key '1': write every 'user'"
        " value one way"
    )
    assert_config_refused_before_torch(tmp_path, _config(data_file, BY_USER, 2), line)


def test_by_key_values_mixing_text_and_numbers_are_counted_as_training_counts_them(tmp_path):
    """``1`` and ``"a"`` are two keys to training (``'1'``, ``'"a"'``): too few for three clients, said
    before torch in the data module's own line."""
    data_file = _rows(tmp_path, "user", [1, 1, "a", "a"])
    line = (
        f"data.partition.key 'user': data.dataset {str(data_file)!r} has 2 distinct 'user' value(s)"
        """ ('"a"', '1'), which cannot fill data.num_clients=3 clients; use num_clients <= 2"""
    )
    assert_config_refused_before_torch(tmp_path, _config(data_file, BY_USER, 3), line)


def test_by_key_values_mixing_text_and_numbers_that_fill_the_clients_go_on(tmp_path):
    _goes_on(tmp_path, _config(_rows(tmp_path, "user", [1, 2, "a", "b"]), BY_USER, 4))


MIXES = [
    [1, 1, "1", "1"],
    [1, "a", "a", 2],
    [True, "true", "x"],
    [1, 1.5, "1.5", "b"],
    ["a", '"a"', 3],
    [False, "null", "x1"],
    [0, "  7", "a-"],
]
UNCERTAIN = [[0, "01"], [False, "n1"], [0, "-"], [1, 1e20, "a"]]
"""Text a laxer JSON reader than ``json`` may parse (``ujson`` takes ``01`` and ``-``), a float in exponent
form: left to the live run."""


@pytest.mark.parametrize("values", MIXES + UNCERTAIN, ids=[str(m) for m in MIXES + UNCERTAIN])
def test_the_early_keys_are_the_keys_training_partitions_by(tmp_path, values):
    """:func:`~lightning_fed.partition_values.training_keys` of a JSON Lines column is what ``ByKey`` reads
    from the set ``datasets`` loads, or ``None`` where that is not certain."""
    import datasets

    from lightning_fed.datamodules.partition import ByKey, _column
    from lightning_fed.partition_values import training_keys

    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"u": v}) + "\n" for v in values), encoding="utf-8")
    ds = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    keys = training_keys(values)
    assert keys == (None if values in UNCERTAIN else _column(ds, "u", ByKey("u")).tolist())


@pytest.mark.parametrize("num_clients", [2, 4])
def test_csv_key_cells_typed_as_one_number_are_one_line_naming_both_spellings(tmp_path, num_clients):
    """pandas types a CSV column of digits as numbers: ``007``, ``7`` and ``0070`` would be the one key 7
    (red team 17 B23: refused as 2 values ``(7, 70)`` for 4 clients, trained as one client for 2)."""
    data_file = _rows(tmp_path, "user", ["007", "7", "70", "0070"], ".csv")
    line = (
        f"data.partition.key 'user': data.dataset {str(data_file)!r}: row 1 has 'user' 7 and row 0 has 'user' 007;"
        " the CSV column is read as numbers, so ByKey reads both as the one client key 7: write every 'user'"
        " value one way, or make the ids text (such as u007)"
    )
    assert_config_refused_before_torch(tmp_path, _config(data_file, BY_USER, num_clients), line)


def test_csv_number_keys_too_few_for_the_clients_are_shown_as_the_file_spells_them(tmp_path):
    data_file = _rows(tmp_path, "user", ["007", "007", "1.50", "1.50"], ".csv")
    line = (
        f"data.partition.key 'user': data.dataset {str(data_file)!r} has 2 distinct 'user' value(s)"
        " (1.50, 007), which cannot fill data.num_clients=3 clients; use num_clients <= 2"
    )
    assert_config_refused_before_torch(tmp_path, _config(data_file, BY_USER, 3), line)


def test_csv_number_keys_each_spelled_one_way_go_on(tmp_path):
    _goes_on(tmp_path, _config(_rows(tmp_path, "user", ["007", "8", "007", "8"], ".csv"), BY_USER, 2))
