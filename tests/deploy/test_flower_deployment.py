"""A real Flower deployment on this machine: a SuperLink and three SuperNodes as separate
processes on 127.0.0.1, running FedDPO on a tiny model through ``lightning_fed.deploy``,
over TLS (a CA made at test time) with SuperNode authentication (registered keys only).

0. TLS and authentication are enforced: the SuperLink completes a TLS handshake verified
   against the test CA and drops plain HTTP; a SuperNode whose key was not registered is
   refused (the SuperLink logs "No SuperNode found with the given public key") and exits.
1. Two rounds with every node alive give the global state of the in-process run of the
   same config (the ClientApp runs the simulation's own client turn).
2. A SuperNode killed (SIGKILL) while it trains in round 1 is left out of that round, the
   run continues with the remaining clients (min_clients=1), and summary.json counts it.

Every process started is stopped by PID afterwards (LocalDeployment), none is left.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import torch
import yaml

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.cli import main
from lightning_fed.deploy.local_deployment import LocalDeployment
from lightning_fed.deploy.processes import ManagedProcess, _descendants, free_port
from lightning_fed.deploy.tls import make_supernode_key
from lightning_fed.federation.sampling import sample_clients

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LocalDeployment uses /proc")

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "lightning_fed" / "deploy" / "flower_app"
NUM_CLIENTS = 3


def _config(tmp_path: Path) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["data"]["init_args"].update(
        num_clients=NUM_CLIENTS,
        synthetic_args={"num_clients": NUM_CLIENTS, "examples_per_client": 16, "groups": ["positive"]},
    )
    cfg["federation"].update(rounds=2, clients_per_round=2, local_steps=2, min_clients=1)
    cfg["trainer"] = {
        "default_root_dir": str(tmp_path / "local"),
        "enable_model_summary": False,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
    }
    path = tmp_path / "feddpo_tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _kill_when_training(dep: LocalDeployment, index: int, stop: threading.Event) -> None:
    """SIGKILL SuperNode ``index`` as soon as it runs a ClientApp process (mid-round)."""
    while not stop.is_set():
        if any(
            b"flwr-clientapp" in Path(f"/proc/{pid}/cmdline").read_bytes()
            for pid in _descendants([dep.supernodes[index].pid])
            if Path(f"/proc/{pid}").exists()
        ):
            time.sleep(1.0)  # let it load the model and start its local steps
            dep.kill_supernode(index, signal.SIGKILL)
            return
        time.sleep(0.05)


def _start_unregistered_supernode(dep: LocalDeployment, folder: Path) -> ManagedProcess:
    """A SuperNode with the CA and a key pair of its own that was never registered."""
    key = make_supernode_key(folder, "rogue")
    cmd = [
        dep._exe("flower-supernode"),
        "--root-certificates",
        str(dep.tls.ca_cert),
        "--superlink",
        dep.superlink_address,
        "--auth-supernode-private-key",
        str(key.private_key),
        "--port",
        str(free_port()),
        "--max-retries",
        "1",
    ]
    return dep._spawn("rogue-supernode", cmd, folder / "flwr_home")


def _assert_tls(dep: LocalDeployment) -> None:
    context = ssl.create_default_context(cafile=str(dep.tls.ca_cert))  # verifies chain and host name
    with (
        socket.create_connection((dep.host, dep.superlink.port), timeout=10) as sock,
        context.wrap_socket(sock, server_hostname=dep.host) as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    with pytest.raises(OSError):  # the same port does not speak plain HTTP
        urllib.request.urlopen(f"http://{dep.superlink_address}/", timeout=10)


def test_feddpo_over_a_real_deployment(tmp_path):
    config = _config(tmp_path)
    cli = main(["fit", "--config", str(config)])
    local = next(c for c in cli.trainer.callbacks if isinstance(c, FederatedLoop)).server.global_state

    victim = sample_clients(NUM_CLIENTS, 2, 0, 0)[0]  # trains in round 1
    deployment = LocalDeployment(
        APP,
        num_supernodes=NUM_CLIENTS,
        workdir=tmp_path / "dep",
        extra_env={"PYTHONPATH": str(ROOT)},
        tls=True,
        supernode_auth=True,
    )
    with deployment as dep:
        _assert_tls(dep)
        assert len(dep.supernode_keys) == NUM_CLIENTS and all(dep.node_ids)
        rogue = _start_unregistered_supernode(dep, tmp_path / "rogue")  # refused while the run goes on
        result = dep.run(
            {"config": str(config), "output-dir": str(tmp_path / "flower"), "timeout": 120.0}, timeout=1800
        )
        assert result.ok, result.output[-4000:]
        assert rogue.popen.wait(timeout=1800) != 0, rogue.log_tail()
        assert "No SuperNode found with the given public key" in dep.superlink.log_tail(400)
        assert len(dep.list_nodes()) == NUM_CLIENTS
        remote = torch.load(tmp_path / "flower" / "global_state.pt", weights_only=True)
        assert remote.keys() == local.keys()
        for k, v in local.items():
            torch.testing.assert_close(remote[k], v, rtol=1e-5, atol=1e-6)

        stop = threading.Event()
        killer = threading.Thread(target=_kill_when_training, args=(dep, victim, stop), daemon=True)
        killer.start()
        result = dep.run({"config": str(config), "output-dir": str(tmp_path / "faulty"), "timeout": 90.0}, timeout=1800)
        stop.set()
        killer.join(5)
        assert result.ok, result.output[-4000:]
        started = {p.pid for p in dep._all} | set(dep._seen)
    assert dep.leftover_pids() == [] and not dep.supernodes[victim].alive()
    assert started

    summary = json.loads((tmp_path / "faulty" / "summary.json").read_text())
    first = summary["rounds"][0]
    assert victim in first["failed"] and victim not in first["aggregated"] and len(first["aggregated"]) == 1
    assert len(summary["rounds"]) == 2 and summary["failed_clients"] >= 1
