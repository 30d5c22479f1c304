"""``data.partition``'s values in a local file refused before torch, in one line naming the option, the
file and the value (:mod:`lightning_fed.partition_values`, red team 15 B09).

On f05487a a ``ByColumn`` column with fewer distinct values than clients printed ``error: partition
ByColumn(column='client'): client 2 got no examples`` and the ``--debug`` hint after the imports; a
client id out of range ``... row 2 has client 5, not an integer in 0..1`` likewise.
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
