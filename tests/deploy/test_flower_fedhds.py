"""FedHDS-Turbo under Flower: clients answer the selection query with their groups' centroids,
the server selects, each client gets its coreset in its train message; same selections and
same global state as the in-process run."""

from __future__ import annotations

import json

import pytest
import torch

from lightning_fed.deploy.records import record_to_instructions
from tests.helpers.flower_sim import SIM_ATOL, assert_same_state, run_in_process, run_on_grid, run_simulation_engine

CONFIG = "configs/fedhds_turbo_tiny.yaml"
OVERRIDES = ["--federation.rounds=2"]
SAME = ("sampled", "trained", "full_sizes", "selected_sizes", "client_groups", "server_groups", "selected_groups")


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    return run_in_process(CONFIG, tmp_path_factory.mktemp("local"), OVERRIDES)


def _selections(history: list[dict]) -> list[dict]:
    # JSON (summary.json) turns client keys into strings; compare in that form
    return [json.loads(json.dumps({k: r[k] for k in SAME})) for r in history]


def test_fedhds_turbo_on_a_flower_grid_matches_in_process(local, tmp_path):
    server, grid = run_on_grid(CONFIG, tmp_path / "flower", OVERRIDES)
    remote = server.server.hooks[0]
    expected = local.server.hooks[0].history
    assert [r["round"] for r in remote.history] == [1, 2]
    assert _selections(remote.history) == _selections(expected)
    assert all(0 < r["data_fraction"] < 0.5 for r in remote.history)
    assert_same_state(local.server.global_state, server.server.global_state)
    # Only the shared frame and a seed go down, only 2-D centroids and local indices come up.
    queries = [m for m in grid.sent if m.metadata.message_type == "query.hook"]
    assert len(queries) == 2 * 3 and all("state" not in m.content.array_records for m in queries)
    assert set(queries[0].content.array_records["payload.arrays"].keys()) == {"frame_mean", "frame_components"}
    # Each trained client's coreset is its instruction, and it trained on exactly that many examples.
    for msg in (m for m in grid.sent if m.metadata.message_type == "train"):
        cfg = msg.content.config_records["config"]
        record = remote.history[int(cfg["round"])]
        indices = record_to_instructions(msg.content)[0]["indices"]
        assert len(indices) == record["selected_sizes"][int(cfg["client-id"])] > 0
    # Same rounds: clients, traffic (frame down, centroids up, counted alike) and local steps.
    for key in ("clients", "aggregated", "up_bytes", "down_bytes"):
        assert [r[key] for r in server.server.report.history] == [r[key] for r in local.server.report.history], key
    steps = [{c: m.get("steps") for c, m in r["train"].items()} for r in server.server.report.history]
    assert steps == [{c: m.get("steps") for c, m in r["train"].items()} for r in local.server.report.history]


@pytest.mark.slow
def test_fedhds_turbo_under_the_simulation_engine_matches_in_process(local, tmp_path):
    """Through Flower's own simulation engine (Ray actors as SuperNodes, in a subprocess)."""
    proc = run_simulation_engine(CONFIG, tmp_path / "sim", 4, OVERRIDES)
    assert proc.returncode == 0, proc.stderr[-3000:]
    remote = torch.load(tmp_path / "sim" / "global_state.pt", weights_only=True)
    assert_same_state(local.server.global_state, remote, atol=SIM_ATOL)
    summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    selection = summary["hooks"]["HierarchicalDataSelection"]
    assert selection["rounds"] == 2 and selection["data_fraction"] == local.server.hooks[0].summary()["data_fraction"]
