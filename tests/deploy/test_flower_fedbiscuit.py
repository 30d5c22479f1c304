"""FedBiscuit under Flower: the grouping runs as hook queries, each client's selector travels in
its train message, and the run reaches the in-process run's assignment and global state."""

from __future__ import annotations

import json

import pytest
import torch
from flwr.app import ArrayRecord

from lightning_fed.deploy.records import record_to_instructions
from lightning_fed.deploy.server import FederatedServer
from tests.helpers.flower_sim import SIM_ATOL, assert_same_state, run_in_process, run_on_grid, run_simulation_engine

CONFIG = "configs/fedbiscuit_tiny.yaml"
# U = 3, T = 1: warm-up rounds 1-3 train selectors 0, 1, 2; the clients are grouped at round 4.
OVERRIDES = ["--federation.rounds=4"]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    return run_in_process(CONFIG, tmp_path_factory.mktemp("local"), OVERRIDES)


def test_fedbiscuit_on_a_flower_grid_matches_in_process(local, tmp_path):
    server, grid = run_on_grid(CONFIG, tmp_path / "flower", OVERRIDES)
    remote = server.server
    (grouping,) = remote.hooks[0].groupings
    (expected,) = local.server.hooks[0].groupings
    assert grouping["round"] == expected["round"] == 4 and grouping["missing"] == []
    assert grouping["assignment"] == expected["assignment"] == remote.strategy.assignment
    torch.testing.assert_close(torch.tensor(grouping["losses"]), torch.tensor(expected["losses"]), rtol=1e-5, atol=0)
    assert_same_state(local.server.global_state, remote.global_state)
    # The queries: round 4 only, to all 6 clients (sampled or not), each with all 3 selectors.
    queries = [m for m in grid.sent if m.metadata.message_type == "query.hook"]
    assert sorted(int(m.content.config_records["config"]["client-id"]) for m in queries) == list(range(6))
    assert {int(m.content.config_records["config"]["round"]) for m in queries} == {3}
    assert all(set(m.content.array_records["state"].keys()) == set(remote.global_state) for m in queries)
    # Each trained client got its selector as its instruction: the warm-up's, then its cluster's.
    trains = [m for m in grid.sent if m.metadata.message_type == "train"]
    for msg in trains:
        cfg = msg.content.config_records["config"]
        round_idx, cid = int(cfg["round"]), int(cfg["client-id"])
        selector = record_to_instructions(msg.content)[0]["selector"]
        assert selector == (round_idx if round_idx < 3 else grouping["assignment"][cid]), (round_idx, cid)
    # Same traffic, the broadcast and the loss replies included.
    assert [r["down_bytes"] for r in remote.report.history] == [r["down_bytes"] for r in local.server.report.history]
    assert [r["up_bytes"] for r in remote.report.history] == [r["up_bytes"] for r in local.server.report.history]
    assert remote.report.history[3]["down_bytes"] > 6 * sum(v.numel() * 4 for v in remote.global_state.values())


def test_a_malformed_grouping_reply_leaves_that_client_unheard(tmp_path):
    def bad_losses(reply):
        if reply.metadata.message_type == "query.hook" and reply.metadata.src_node_id == 3:  # node 3: client 2
            reply.content.array_records["payload.arrays"] = ArrayRecord({"losses": torch.zeros(2)})
        return reply

    server, _ = run_on_grid(CONFIG, tmp_path / "flower", OVERRIDES, tamper=bad_losses)
    (grouping,) = server.server.hooks[0].groupings
    assert grouping["missing"] == [2] and len(grouping["assignment"]) == 6
    summary = json.loads((tmp_path / "flower" / "summary.json").read_text())
    assert summary["missing_replies"] == 0  # the transport accepted it; the hook found it malformed
    assert [r["round"] for r in summary["rounds"]] == [1, 2, 3, 4]


def test_a_dead_node_is_a_missing_reply(tmp_path):
    server, _ = run_on_grid(CONFIG, tmp_path / "flower", [*OVERRIDES, "--federation.min_clients=1"], dead=(6,))
    (grouping,) = server.server.hooks[0].groupings
    assert grouping["missing"] == [5]
    summary = json.loads((tmp_path / "flower" / "summary.json").read_text())
    assert summary["missing_replies"] == 1


@pytest.mark.slow
def test_fedbiscuit_under_the_simulation_engine_matches_in_process(local, tmp_path):
    """Through Flower's own simulation engine (Ray actors as SuperNodes, in a subprocess)."""
    proc = run_simulation_engine(CONFIG, tmp_path / "sim", 6, OVERRIDES)
    assert proc.returncode == 0, proc.stderr[-3000:]
    remote = torch.load(tmp_path / "sim" / "global_state.pt", weights_only=True)
    assert_same_state(local.server.global_state, remote, atol=SIM_ATOL)
    summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    (grouping,) = summary["hooks"]["ClientGrouping"]["groupings"]
    assert grouping["assignment"] == local.server.hooks[0].groupings[0]["assignment"]
    for key in ("clients", "aggregated", "up_bytes", "down_bytes"):
        assert [r[key] for r in summary["rounds"]] == [r[key] for r in local.server.report.history], key


def test_a_hook_reading_client_data_on_the_server_is_refused_at_start(tmp_path):
    from lightning_fed.deploy.apps import client_app, load_run
    from lightning_fed.selection import RandomSelection
    from tests.helpers.flower_grid import InProcessGrid

    module, datamodule, loop, _ = load_run("configs/tiny.yaml")
    loop.hooks.append(RandomSelection(ratio=0.5))
    server = FederatedServer(loop, module, datamodule.num_clients, tmp_path, datamodule=datamodule)
    grid = InProcessGrid(client_app, datamodule.num_clients, {"config": "configs/tiny.yaml"})
    with pytest.raises(
        ValueError, match=r"^federation.hooks: RandomSelection cannot run under Flower: it reads client"
    ):
        server.start(grid, min_nodes=4)
    assert grid.sent == []  # refused before any message, round 1 included
