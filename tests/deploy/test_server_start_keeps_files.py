"""A Flower server run that fails before it completes a round leaves an earlier run's folder as it was.

Issue 41 (Direction): a run that fails never deletes or rewrites a file an earlier run wrote. Here
the earlier run is a finished one-round server run in the same ``output-dir``; the second run fails
at the partition query (the grid raises) or in its first round (no node holds a valid partition,
so no client returns an update). Every file of the folder is compared byte for byte before and after.
"""

from __future__ import annotations

import contextlib

import pytest
from flwr.app import ConfigRecord, RecordDict

from lightning_fed.deploy.apps import load_run
from lightning_fed.deploy.server import FederatedServer
from tests.deploy.test_server_replies import CONFIG_PATH, NUM_CLIENTS, ScriptedGrid, _run, _train_replies, honest_eval
from tests.helpers.files import assert_unchanged, snapshot


def _grid_gone(node: int) -> RecordDict:
    raise ConnectionError("the grid went away")


def _no_valid_partition(node: int) -> RecordDict:
    return RecordDict({"partition": ConfigRecord({"partition-id": NUM_CLIENTS + 7})})


@pytest.mark.parametrize(
    "partition, error, match, warns",
    [
        (_grid_gone, ConnectionError, "the grid went away", False),
        (_no_valid_partition, RuntimeError, "only 0 of 2 clients returned a valid update", True),
    ],
    ids=["partition_query_raises", "first_round_fails"],
)
def test_a_failed_server_run_leaves_the_earlier_runs_files(tmp_path, partition, error, match, warns):
    _run(tmp_path, ScriptedGrid(_train_replies(lambda m, h: None), honest_eval))
    folder = tmp_path / "flower"
    before = snapshot(folder)
    assert {"summary.json", "rounds.jsonl", "global_state.pt"} <= {p.name for p in before}
    module, datamodule, run, _ = load_run(CONFIG_PATH, "--federation.rounds=1 --federation.min_clients=1")
    server = FederatedServer(run, module, datamodule.num_clients, folder, timeout=5)
    grid = ScriptedGrid(_train_replies(lambda m, h: None), honest_eval, partition=partition)
    left_out = pytest.warns(UserWarning, match="is left out") if warns else contextlib.nullcontext()
    with pytest.raises(error, match=match), left_out:
        server.start(grid, min_nodes=NUM_CLIENTS)
    assert_unchanged(before, folder)
