"""A ClientApp process loads its backbone once and reuses it in every later round."""

from __future__ import annotations

import lightning_fed.modules.base as base
from lightning_fed.deploy import apps
from lightning_fed.deploy.apps import client_app, load_run
from lightning_fed.deploy.server import FederatedServer
from tests.helpers.flower_grid import InProcessGrid

CONFIG = "configs/tiny.yaml"


def test_round_two_does_not_load_the_backbone_again(tmp_path, monkeypatch):
    loads = []
    real = base.load_backbone

    def counting(cfg):
        loads.append(cfg)
        return real(cfg)

    monkeypatch.setattr(base, "load_backbone", counting)
    apps._runner.cache_clear()
    overrides = "--federation.rounds=2 --federation.clients_per_round=2"
    module, datamodule, loop, _ = load_run(CONFIG, overrides)
    assert len(loads) == 1  # the server's module
    server = FederatedServer(loop, module, datamodule.num_clients, tmp_path / "flower", timeout=5)
    grid = InProcessGrid(client_app, datamodule.num_clients, {"config": CONFIG, "overrides": overrides})
    server.start(grid, min_nodes=datamodule.num_clients)
    trained = [m for m in grid.sent if m.metadata.message_type.startswith("train")]
    assert len(trained) == 4  # two rounds of two clients
    assert len(loads) == 2, f"{len(loads) - 1} client-side backbone loads for {len(trained)} client turns"
    apps._runner.cache_clear()
