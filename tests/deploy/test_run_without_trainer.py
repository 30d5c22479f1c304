"""The Flower apps build the run from the YAML themselves: no LightningCLI, no Trainer on the
server, and nothing of ``callbacks/`` (the Lightning adapter) in ``deploy/``."""

from __future__ import annotations

import functools
import inspect
import json

import lightning.pytorch as pl

from lightning_fed import run_factory
from lightning_fed.deploy.apps import client_app, load_run
from lightning_fed.deploy.server import FederatedServer
from lightning_fed.run import FederatedRun
from tests.helpers.flower_grid import InProcessGrid
from tests.test_import_graph import import_graph

CONFIG = "configs/tiny.yaml"
CLIENT = "lightning_fed/deploy/client.py"


def _reachable(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def test_deploy_imports_nothing_from_callbacks():
    graph = import_graph()
    deploy = {m for m in graph if m.startswith("lightning_fed.deploy")}
    assert "lightning_fed.deploy.apps" in deploy
    direct = sorted(f"{m} -> {t}" for m in deploy for t in graph[m] if t.startswith("lightning_fed.callbacks"))
    assert direct == []
    # nor through another module: the Flower processes never load the Lightning adapter
    assert sorted(m for m in _reachable(graph, deploy) if m.startswith("lightning_fed.callbacks")) == []


def test_the_flower_server_builds_no_trainer(tmp_path, monkeypatch):
    """A simulated Flower run of the tiny config: a ``Trainer`` built anywhere but in a client's
    turn (``ClientRunner``, which shares this process on the in-process grid) raises."""
    built = []
    original = pl.Trainer.__init__

    @functools.wraps(original)  # the parser still reads the Trainer's options from its signature
    def guarded(self, *args, **kwargs):
        callers = [frame.filename for frame in inspect.stack()[1:]]
        if not any(f.endswith(CLIENT) for f in callers):
            raise AssertionError("a Trainer was built outside a Flower client")
        built.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(pl.Trainer, "__init__", guarded)
    overrides = "--federation.rounds=1 --federation.eval_every=1"
    module, datamodule, run, trainer_config = load_run(CONFIG, overrides)
    assert isinstance(run, FederatedRun) and run.rounds == 1 and trainer_config["default_root_dir"] == "runs/tiny"
    server = FederatedServer(run, module, datamodule.num_clients, tmp_path / "flower", timeout=30)
    assert server.server.hooks is run.hooks and type(server.server.compressor) is type(run_factory.compressor(run))
    grid = InProcessGrid(client_app, datamodule.num_clients, {"config": CONFIG, "overrides": overrides})
    server.start(grid, min_nodes=datamodule.num_clients)
    summary = json.loads((tmp_path / "flower" / "summary.json").read_text())
    assert [r["round"] for r in summary["rounds"]] == [1] and summary["engine"] == "flower"
    assert built  # the clients trained (their Trainers), the server built none
