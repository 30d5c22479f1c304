"""A data set that cannot make the clients is one line ``error: ...`` naming the option, its value and
the data file (issue 41 M7: on 08c1cba each printed a line naming neither option nor file, then the
``--debug`` hint): ``ByKey`` over fewer distinct values than ``data.num_clients`` (refused before
torch from a local file's rows), a row over ``data.max_length`` with ``on_overflow: error``, a client
whose every row ``on_overflow: drop`` leaves out (both need the tokenizer: after the imports, before
the run folder is made)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import lightning_fed
from tests.helpers.refusals import assert_config_refused_before_torch, shipped_config, write_config

USERS = ("ana", "ana", "ben", "ben")


def _rows(folder: Path, long_for: tuple[str, ...] = ()) -> Path:
    """``train.jsonl``: two rows per user, those of ``long_for`` (and the second of ana) over 16 bytes."""
    path = folder / "train.jsonl"
    rows = []
    for i, user in enumerate(USERS):
        long = user in long_for or i == 1
        question = f"q{i} tell me something long please" if long else f"q{i}"
        rows.append(
            {"question": question, "preferred": "a fairly long answer" if long else "a", "other": "b", "user": user}
        )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _config(data_file: Path, **init_args: object) -> dict:
    config = shipped_config("tiny")
    data = config["data"]["init_args"]
    data.pop("synthetic_args")
    data.update(
        dataset=str(data_file),
        field_map={"prompt": "question", "chosen": "preferred", "rejected": "other"},
        partition={"class_path": "lightning_fed.datamodules.ByKey", "init_args": {"key": "user"}},
        num_clients=2,
        batch_size=2,
        val_fraction=0.0,
    )
    data.update(init_args)
    config["federation"].update(rounds=1, local_steps=1)
    config["trainer"]["default_root_dir"] = "runs/tiny"
    return config


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_by_key_fewer_values_than_clients_is_one_line_before_torch(tmp_path, suffix):
    data_file = _rows(tmp_path)
    if suffix == ".csv":
        rows = [json.loads(line) for line in data_file.read_text().splitlines()]
        data_file = tmp_path / "train.csv"
        header = list(rows[0])
        data_file.write_text("\n".join([",".join(header), *(",".join(r[k] for k in header) for r in rows)]) + "\n")
    line = (
        f"data.partition.key 'user': data.dataset {str(data_file)!r} has 2 distinct 'user' value(s)"
        " ('ana', 'ben'), which cannot fill data.num_clients=4 clients; use num_clients <= 2"
    )
    assert_config_refused_before_torch(tmp_path, _config(data_file, num_clients=4), line)


def _fit_refused(tmp_path: Path, config: dict, line: str) -> None:
    """``fit`` (torch imported: the tokenizer decides) exits 2 with ``error: LINE`` alone, from an empty
    folder that stays empty (the run folder is not made)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    path = write_config(tmp_path, config)
    proc = lightning_fed("fit", "--config", str(path), cwd=cwd)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n"), proc.stderr[-2000:]
    assert list(cwd.iterdir()) == []


def test_a_row_over_max_length_with_on_overflow_error_is_one_line(tmp_path):
    data_file = _rows(tmp_path)
    line = (
        f"data.max_length: row 1 (line 2) of data.dataset {str(data_file)!r} (client 0) has 54 tokens (prompt 33 +"
        " response 21) > max_length=16 with data.on_overflow='error'; raise data.max_length or set"
        " data.on_overflow to truncate or drop"
    )
    _fit_refused(tmp_path, _config(data_file, max_length=16), line)


def test_a_client_whose_every_row_is_dropped_is_one_line(tmp_path):
    data_file = _rows(tmp_path, long_for=("ben",))
    line = (
        f"data.on_overflow='drop': client 1 of data.dataset {str(data_file)!r} has no example left (2 of its 2 rows"
        " longer than data.max_length=16); raise data.max_length or set data.on_overflow to truncate"
    )
    _fit_refused(tmp_path, _config(data_file, max_length=16, on_overflow="drop"), line)
