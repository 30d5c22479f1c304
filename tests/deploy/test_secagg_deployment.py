"""SecAgg+ over a real local deployment: a SuperLink and four SuperNodes as processes, TLS with a
test CA and SuperNode authentication (as ``test_flower_deployment.py``).

1. One round of FedAvg through Flower's SecAgg+ reaches the global state of the in-process run of
   the same config (same encoding, same rounding seeds), and the plain FedAvg state within the
   quantization bound.
2. A SuperNode killed after it shared its keys (when it receives its third SecAgg+ message, the
   masked-vector stage in which it trains) is unmasked with its neighbours' shares and left out;
   the round goes on with the three others. (A node lost *during* key sharing stops the round in
   flwr 1.41: see docs/privacy.md, "Secure aggregation".)
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.cli import main
from lightning_fed.deploy.local_deployment import LocalDeployment
from lightning_fed.deploy.secure_aggregation import quantization_error_bound

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LocalDeployment uses /proc"),
]

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "lightning_fed" / "deploy" / "flower_app"
NUM_CLIENTS = 4
SECAGG = {
    "class_path": "lightning_fed.deploy.secure_aggregation.SecureAggregation",
    "init_args": {
        "strategy": {"class_path": "lightning_fed.strategies.FedAvg"},
        "num_shares": 3,
        "reconstruction_threshold": 2,
        "clipping_range": 0.5,
        "max_weight": 32.0,
    },
}


def _config(tmp_path: Path, name: str, secure: bool) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["data"]["init_args"].update(
        num_clients=NUM_CLIENTS,
        synthetic_args={"num_clients": NUM_CLIENTS, "examples_per_client": 16, "groups": ["positive"]},
    )
    cfg["federation"].update(rounds=1, clients_per_round=NUM_CLIENTS, local_steps=2, min_clients=1)
    if secure:
        cfg["federation"]["strategy"] = SECAGG
    cfg["trainer"] = {
        "default_root_dir": str(tmp_path / name),
        "enable_model_summary": False,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _global_state(config: Path) -> dict[str, torch.Tensor]:
    cli = main(["fit", "--config", str(config)])
    return next(c for c in cli.trainer.callbacks if isinstance(c, FederatedLoop)).server.global_state


def _kill_at_train_message(dep: LocalDeployment, index: int, nth: int, stop: threading.Event) -> None:
    """SIGKILL SuperNode ``index`` once it has received its ``nth`` train message from now on
    (its log's "Receiving: train message" lines; SecAgg+ stages: 1 setup, 2 share keys, 3 masked vector)."""
    log = dep.supernodes[index].log_path

    def count() -> int:
        return log.read_text(errors="replace").count("Receiving: train message")

    base = count()
    while not stop.is_set():
        if count() - base >= nth:
            dep.kill_supernode(index, signal.SIGKILL)
            return
        time.sleep(0.05)


def test_secagg_over_a_real_deployment(tmp_path):
    plain = _global_state(_config(tmp_path, "plain", secure=False))
    config = _config(tmp_path, "secagg", secure=True)
    simulated = _global_state(config)
    deployment = LocalDeployment(
        APP,
        num_supernodes=NUM_CLIENTS,
        workdir=tmp_path / "dep",
        extra_env={"PYTHONPATH": str(ROOT)},
        tls=True,
        supernode_auth=True,
    )
    with deployment as dep:
        result = dep.run(
            {"config": str(config), "output-dir": str(tmp_path / "flower"), "timeout": 120.0}, timeout=1800
        )
        assert result.ok, result.output[-4000:]
        remote = torch.load(tmp_path / "flower" / "global_state.pt", weights_only=True)
        bound = NUM_CLIENTS * quantization_error_bound(0.5, 2**22) / (NUM_CLIENTS * 12 / 32)  # 12 train examples each
        for k, v in simulated.items():
            assert torch.equal(remote[k], v), k
            assert (remote[k] - plain[k]).abs().max().item() <= bound + 1e-7, k

        stop = threading.Event()
        killer = threading.Thread(target=_kill_at_train_message, args=(dep, 0, 3, stop), daemon=True)
        killer.start()
        result = dep.run({"config": str(config), "output-dir": str(tmp_path / "faulty"), "timeout": 90.0}, timeout=1800)
        stop.set()
        killer.join(5)
        assert result.ok, result.output[-4000:]
    assert dep.leftover_pids() == []
    first = json.loads((tmp_path / "faulty" / "summary.json").read_text())["rounds"][0]
    assert first["failed"] == [0] and first["aggregated"] == [1, 2, 3]
