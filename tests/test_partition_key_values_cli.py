"""``ByKey``'s key column, refused in one line naming ``data.partition.key``, the file and its own columns
(:func:`lightning_fed.data_cross_rules.partition_column_problem`), before torch.

Red team 15 on f6ad729 (``od_tiny.yaml``: own_data on a tiny GPT-2, ``ByKey(user)``, ``field_map`` from
question/preferred/other), L1: a file without the key column got ``has no such column (columns: prompt,
chosen, rejected)``: the names ``data.field_map`` reads its columns as, not the file's question/preferred/other.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.refusals import assert_config_refused_before_torch, shipped_config

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


def test_a_key_column_the_file_lacks_lists_the_file_s_own_columns(tmp_path):
    rows = [{k: v for k, v in row.items() if k != "user"} for row in _rows(USERS)]
    dataset = _write(tmp_path / "data" / "train.jsonl", rows)
    line = (
        f"data.partition.key 'user': data.dataset {str(dataset)!r} has no such column"
        " (columns: question, preferred, other)"
    )
    assert_config_refused_before_torch(tmp_path, _config(dataset), line)
