"""A real deployment whose SuperNodes run ``--isolation process`` beside a long-lived
``lightning-fed flower clientapp`` process: round 2 does not load the backbone again, and
the run reaches the in-process run's global state.

Two SuperNodes (one client each), configs/tiny.yaml for 2 rounds with both clients in each
round. Each ClientApp process logs one line per backbone load (``apps._runner``) and one per
task; both are counted in its log. Every process is stopped by PID (LocalDeployment).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.cli import main
from lightning_fed.deploy.local_deployment import LocalDeployment
from tests.helpers.flower_sim import assert_same_state

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LocalDeployment uses /proc")

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "lightning_fed" / "deploy" / "flower_app"
NUM_CLIENTS, ROUNDS = 2, 2
LOAD_LINE = "client runner built (backbone loaded)"


def _config(tmp_path: Path) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["data"]["init_args"].update(
        num_clients=NUM_CLIENTS, synthetic_args={"examples_per_client": 16, "groups": ["positive"]}
    )
    cfg["federation"].update(rounds=ROUNDS, clients_per_round=NUM_CLIENTS, local_steps=2)
    cfg["trainer"] = {
        "default_root_dir": str(tmp_path / "local"),
        "enable_model_summary": False,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
    }
    path = tmp_path / "tiny_2x2.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow  # ~1 min on 2 cores (an in-process run, then a SuperLink, 2 SuperNodes and 2 ClientApp processes)
def test_clientapp_process_loads_the_backbone_once_per_run(tmp_path):
    config = _config(tmp_path)
    cli = main(["fit", "--config", str(config)])
    local = next(c for c in cli.trainer.callbacks if isinstance(c, FederatedLoop)).server.global_state

    deployment = LocalDeployment(
        APP,
        num_supernodes=NUM_CLIENTS,
        workdir=tmp_path / "dep",
        extra_env={"PYTHONPATH": str(ROOT)},
        isolation="process",
    )
    with deployment as dep:
        result = dep.run(
            {"config": str(config), "output-dir": str(tmp_path / "flower"), "timeout": 120.0}, timeout=1800
        )
        assert result.ok, result.output[-4000:]
        workers = list(dep.clientapps)
        assert len(workers) == NUM_CLIENTS and all(w.alive() for w in workers)
        for worker in workers:  # what a service manager does: SIGTERM, then exit status 143
            worker.popen.send_signal(signal.SIGTERM)
        assert [w.popen.wait(timeout=1800) for w in workers] == [143] * NUM_CLIENTS
        started = {p.pid for p in dep._all} | set(dep._seen)
    assert dep.leftover_pids() == [] and not any(w.alive() for w in workers) and started

    remote = torch.load(tmp_path / "flower" / "global_state.pt", weights_only=True)
    assert_same_state(local, remote)
    for worker in workers:
        log = worker.log_path.read_text()
        trained = log.count("task train completed")
        assert trained == ROUNDS, f"{worker.name}: {trained} train tasks\n{log[-3000:]}"
        assert log.count(LOAD_LINE) == 1, f"{worker.name} loaded the backbone {log.count(LOAD_LINE)} times"
