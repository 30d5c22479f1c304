"""Real multi-machine runs: any lightning-fed method as a Flower ClientApp and ServerApp.

See ``apps.py`` for the apps and their run config, ``server.py`` for the Flower strategy
that wraps ours, ``client.py`` for the client's turn (the simulation's own code path), and
``secure_aggregation.py`` / ``secure_aggregation_flower.py`` for SecAgg+ (Flower's protocol
driving the train round; the same encoding simulated in process).

The names below are imported on first use: ``lightning-fed flower clientapp`` (a process per
SuperNode, ``clientapp_process.py``) reads its arguments before torch and the model libraries
are imported, and before Flower itself (``flower_command.py``: its help answers without the
``flower`` extra).
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "ClientLoop": "lightning_fed.deploy.client",
    "ClientRunner": "lightning_fed.deploy.client",
    "FederatedServer": "lightning_fed.deploy.server",
    "SecureAggregation": "lightning_fed.deploy.secure_aggregation",
}

__all__ = ["ClientLoop", "ClientRunner", "FederatedServer", "SecureAggregation"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
