"""The Flower apps against the in-process loop: same clients, same steps, same global state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.cli import main
from lightning_fed.deploy.apps import client_app, load_run
from lightning_fed.deploy.server import FederatedServer
from tests.helpers.flower_grid import InProcessGrid

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "configs/tiny.yaml"


def _in_process(tmp_path, overrides: list[str]) -> dict[str, torch.Tensor]:
    args = [
        "fit",
        "--config",
        CONFIG,
        f"--trainer.default_root_dir={tmp_path}/local",
        "--trainer.logger=false",
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false",
        "--federation.batch_clients=off",  # one client after another, as each Flower ClientApp trains
        *overrides,
    ]
    cli = main(args)
    return next(c for c in cli.trainer.callbacks if isinstance(c, FederatedLoop)).server.global_state


def _flower(tmp_path, overrides: list[str], grid_kwargs=None, dead=()) -> tuple[FederatedServer, InProcessGrid]:
    run_config = {"config": CONFIG, "overrides": " ".join(overrides)}
    module, datamodule, loop, _ = load_run(CONFIG, run_config["overrides"])
    server = FederatedServer(loop, module, datamodule.num_clients, tmp_path / "flower", timeout=5)
    grid = InProcessGrid(client_app, datamodule.num_clients, run_config, **(grid_kwargs or {}))
    grid.dead.update(dead)
    server.start(grid, min_nodes=datamodule.num_clients - len(dead))
    return server, grid


@pytest.mark.parametrize("strategy", ["FedAvg", "Scaffold"])
def test_flower_matches_in_process(tmp_path, strategy):
    overrides = ["--federation.rounds=2", f"--federation.strategy=lightning_fed.strategies.{strategy}"]
    local = _in_process(tmp_path, overrides)
    server, grid = _flower(tmp_path, overrides)
    assert local.keys() == server.server.global_state.keys()
    for k, v in local.items():  # same code path, same seeds: equal up to float summation order
        torch.testing.assert_close(server.server.global_state[k], v, rtol=1e-5, atol=1e-6)
    moved = max((v - server.module.shared_parameters()[k]).abs().max().item() for k, v in local.items())
    assert moved < 1e-5
    summary = json.loads((tmp_path / "flower" / "summary.json").read_text())
    assert [r["round"] for r in summary["rounds"]] == [1, 2] and summary["engine"] == "flower"
    assert "pref_acc" in summary["final"]["val"]
    assert (tmp_path / "flower" / "adapter" / "adapter_config.json").exists()


def test_flower_simulation_engine_matches_in_process(tmp_path):
    """Through Flower's own simulation engine (Ray actors as SuperNodes, in a subprocess)."""
    overrides = ["--federation.rounds=2"]
    local = _in_process(tmp_path, overrides)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "FLWR_TELEMETRY_ENABLED": "0",
        "PYTHONPATH": str(ROOT),
    }
    cmd = [
        sys.executable,
        str(ROOT / "tests/helpers/flower_sim.py"),
        str(ROOT / CONFIG),
        str(tmp_path / "sim"),
        "4",
        " ".join(overrides),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    remote = torch.load(tmp_path / "sim" / "global_state.pt", weights_only=True)
    assert remote.keys() == local.keys()
    for k, v in local.items():
        torch.testing.assert_close(remote[k], v, rtol=1e-5, atol=1e-6)
    assert json.loads((tmp_path / "sim" / "summary.json").read_text())["engine"] == "flower"


def test_only_named_tensors_travel(tmp_path):
    server, grid = _flower(tmp_path, ["--federation.rounds=1"])
    shared = set(server.module.shared_parameters())
    for msg in grid.sent:
        for name, record in msg.content.array_records.items():
            assert set(record.keys()) <= shared, name  # LoRA only, never the backbone
    up = server.server.report.history[0]["up_bytes"]
    lora_bytes = sum(p.numel() * p.element_size() for p in server.module.shared_parameters().values())
    assert up == 2 * lora_bytes  # two clients, each uploads its LoRA once


def test_dead_node_is_left_out_and_run_continues(tmp_path):
    overrides = ["--federation.rounds=2", "--federation.min_clients=1"]
    server, _ = _flower(tmp_path, overrides, dead={1})  # node 1 holds client 0
    hist = server.server.report.history
    assert all(0 not in r["aggregated"] for r in hist)
    sampled_zero = [r for r in hist if 0 in r["clients"]]
    assert all(0 in r["failed"] for r in sampled_zero)


def test_poisoned_reply_is_rejected(tmp_path):
    def poison(reply):
        if reply.metadata.message_type != "train":
            return reply
        rec = reply.content.array_records["state"]
        name = next(iter(rec.keys()))
        state = dict(rec.to_torch_state_dict())
        state[name] = torch.full_like(state[name], float("nan"))
        from flwr.app import ArrayRecord

        reply.content.array_records["state"] = ArrayRecord(state)
        return reply

    with pytest.raises(RuntimeError, match="min_clients"):
        _flower(tmp_path, ["--federation.rounds=1"], grid_kwargs={"tamper": poison})
