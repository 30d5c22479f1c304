"""``ByKey`` over more distinct values of its key than ``data.num_clients`` groups the values, as it
always has (value ``i`` in sorted order to client ``i % num_clients``), and says so (red team 17 B20:
four users into two clients trained as two clients of two users each, without a word): one warning line
at setup naming ``data.partition.key``, the file, the count of values and ``data.num_clients`` and
which values each client holds, and the same in ``summary.json``'s ``data`` section."""

from __future__ import annotations

import json

from tests.helpers.cli import lightning_fed
from tests.helpers.refusals import shipped_config, write_config

USERS = ("ana", "ben", "chen", "dara")


def test_by_key_with_more_values_than_clients_warns_how_they_are_grouped(tmp_path):
    data_file = tmp_path / "train.jsonl"
    rows = [{"prompt": f"q{i}", "chosen": "a", "rejected": "b", "user": u} for u in USERS for i in range(2)]
    data_file.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    config = shipped_config("tiny")
    data = config["data"]["init_args"]
    data.pop("synthetic_args")
    data.update(
        dataset=str(data_file),
        partition={"class_path": "lightning_fed.datamodules.ByKey", "init_args": {"key": "user"}},
        num_clients=2,
        batch_size=2,
        val_fraction=0.0,
    )
    config["federation"].update(rounds=1, local_steps=1)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed("fit", "--config", str(write_config(tmp_path, config)), cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = (
        f"warning: data.partition.key 'user': data.dataset {str(data_file)!r} has 4 distinct 'user' values for"
        " data.num_clients=2 clients, so they are grouped: value i in sorted order goes to client i % 2"
        " (client 0: 'ana', 'chen'; client 1: 'ben', 'dara'); set data.num_clients=4 for one client per value"
    )
    assert [w for w in proc.stderr.splitlines() if w.startswith("warning:")] == [line], proc.stderr[-2000:]
    (summary,) = cwd.rglob("summary.json")
    grouping = json.loads(summary.read_text())["data"]["key_groups"]
    assert grouping == {"key": "user", "distinct_values": 4, "values_per_client": [2, 2]}
