"""Run a config through Flower's simulation engine (Ray) in its own process, and the
in-process / in-process-grid runs the Flower parity tests compare it with.

python tests/helpers/flower_sim.py <config.yaml> <output-dir> <num-supernodes> [overrides]
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]


def run_in_process(config: str, out: Path, overrides: list[str]) -> Any:
    """``lightning-fed fit`` in this process; returns the run's FederatedLoop.

    Its clients train one after another (``federation.batch_clients: off`` unless ``overrides`` say
    otherwise): the Flower run it is compared with trains each client alone in its ClientApp, and
    a batched in-process run equals that only to float rounding, and under dropout (the tiny
    variants keep GPT-2's own) only in distribution; the batched path's own parity with the
    sequential one is tests/batching/."""
    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.cli import main

    args = [
        "fit",
        "--config",
        config,
        f"--trainer.default_root_dir={out}",
        "--trainer.logger=false",
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false",
        "--federation.batch_clients=off",
        *overrides,
    ]
    cli = main(args)
    return next(c for c in cli.trainer.callbacks if isinstance(c, FederatedLoop))


def run_on_grid(config: str, out: Path, overrides: list[str], tamper: Any = None, dead: tuple = ()) -> tuple[Any, Any]:
    """The Flower ServerApp's :class:`FederatedServer` over an in-process grid of ClientApps."""
    from lightning_fed.deploy.apps import client_app, load_run
    from lightning_fed.deploy.server import FederatedServer
    from tests.helpers.flower_grid import InProcessGrid

    run_config = {"config": config, "overrides": " ".join(overrides)}
    module, datamodule, run, _ = load_run(config, run_config["overrides"])
    server = FederatedServer(run, module, datamodule.num_clients, out, timeout=30, datamodule=datamodule)
    grid = InProcessGrid(client_app, datamodule.num_clients, run_config, tamper=tamper)
    grid.dead.update(dead)
    server.start(grid, min_nodes=datamodule.num_clients - len(dead))
    return server, grid


def run_simulation_engine(config: str, out: Path, nodes: int, overrides: list[str]) -> subprocess.CompletedProcess:
    """This script in a subprocess: the run under Flower's simulation engine (Ray)."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "FLWR_TELEMETRY_ENABLED": "0",
        "PYTHONPATH": str(ROOT),
    }
    cmd = [sys.executable, str(Path(__file__).resolve()), str(ROOT / config), str(out), str(nodes), " ".join(overrides)]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


if __name__ == "__main__":
    from flwr.simulation import run_simulation

    from lightning_fed.deploy.apps import make_client_app, make_server_app

    config, out, nodes = sys.argv[1], sys.argv[2], int(sys.argv[3])
    settings = {"config": config, "overrides": sys.argv[4] if len(sys.argv) > 4 else ""}
    run_simulation(
        make_server_app(**settings, **{"output-dir": out}),
        make_client_app(**settings),
        num_supernodes=nodes,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": {"num_cpus": 2}},
    )


# Flower's simulation engine runs each ClientApp in a Ray actor with one intra-op thread, so
# sums are ordered differently; Adam's first steps turn that into small absolute differences
# on near-zero LoRA entries (measured on FedBiscuit's 4 rounds: at most 2.2e-5, with the
# same sampled clients, assignment and traffic).
SIM_ATOL = 1e-4


def assert_same_state(a: dict, b: dict, atol: float = 1e-6) -> None:
    """``b`` equals ``a`` key by key: same code path and seeds, so equal up to float summation order."""
    assert a.keys() == b.keys()
    for k, v in a.items():
        torch.testing.assert_close(b[k], v, rtol=1e-5, atol=atol, msg=k)
