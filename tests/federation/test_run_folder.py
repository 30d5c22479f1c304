"""An earlier run's records in the run folder are cut or replaced only once the new run has
completed a round (:mod:`lightning_fed.federation.run_folder`, issue 41's invariant)."""

from __future__ import annotations

import json

from lightning_fed.federation.client_metrics import client_file, write_client_file
from lightning_fed.federation.round_history import ROUNDS_FILE, RoundHistory
from lightning_fed.federation.run_folder import EarlierFiles
from tests.helpers.files import assert_unchanged, snapshot


def _earlier_run(folder, rounds: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"round": r, "clients": [0], "up_bytes": 1, "down_bytes": 1, "seconds": 0.1})
        for r in range(1, rounds + 1)
    ]
    (folder / ROUNDS_FILE).write_text("\n".join(lines) + "\n")
    for r in range(1, rounds + 1):
        write_client_file(client_file(folder, "train", r), "train", r, {"0": {"loss": float(r)}}, {0: 4})
    write_client_file(client_file(folder, "val", 0), "val", 0, {"0": {"loss": 0.7}}, {0: 4})
    (folder / "summary.json").write_text("{}")


def _resumed(folder, rounds: int) -> RoundHistory:
    history = RoundHistory()
    history.load_state_dict({"rounds": rounds, "folder": str(folder)})
    history.attach(folder, guard=EarlierFiles(folder))
    return history


def test_a_resume_that_fails_before_its_first_round_leaves_the_records(tmp_path):
    _earlier_run(tmp_path, rounds=3)  # killed after round 3's record, before its checkpoint
    before = snapshot(tmp_path)
    history = _resumed(tmp_path, rounds=2)
    history.write_clients("val", 0, {"0": {"loss": 9.0}}, {0: 4})  # an earlier file: waits; then a failure
    assert [r["round"] for r in history] == [1, 2]  # still readable where they are
    assert_unchanged(before, tmp_path)


def test_the_first_round_of_the_resumed_run_cuts_the_records_back_and_appends(tmp_path):
    _earlier_run(tmp_path, rounds=3)
    history = _resumed(tmp_path, rounds=2)
    history.append(
        {"round": 3, "clients": [1], "up_bytes": 2, "down_bytes": 2, "seconds": 0.2, "train": {"1": {"loss": 0.5}}},
        {1: 4},
    )
    lines = [json.loads(line) for line in (tmp_path / ROUNDS_FILE).read_text().splitlines()]
    assert [(r["round"], r["clients"]) for r in lines] == [(1, [0]), (2, [0]), (3, [1])]
    assert history[2]["train"] == {"1": {"loss": 0.5}}


def test_a_new_run_in_a_used_folder_deletes_the_earlier_records_only_after_a_round(tmp_path):
    _earlier_run(tmp_path, rounds=2)
    client_file(tmp_path, "val", 0).unlink()
    before = snapshot(tmp_path)
    history = RoundHistory()
    guard = EarlierFiles(tmp_path)
    history.attach(tmp_path, guard=guard)
    history.write_clients("val", 0, {"0": {"loss": 1.0}}, {0: 4})  # a file of its own: written now
    assert client_file(tmp_path, "val", 0).is_file()
    assert_unchanged(
        {**before, client_file(tmp_path, "val", 0): client_file(tmp_path, "val", 0).read_bytes()}, tmp_path
    )
    history.append({"round": 1, "clients": [2], "up_bytes": 2, "down_bytes": 2, "seconds": 0.2}, {2: 4})
    assert len((tmp_path / ROUNDS_FILE).read_text().splitlines()) == 1
    assert not client_file(tmp_path, "train", 2).exists()  # the earlier run's round 2 is gone now
    assert client_file(tmp_path, "val", 0).is_file()  # this run's own file is kept
