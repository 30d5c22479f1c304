"""Real multi-machine runs: any lightning-fed method as a Flower ClientApp and ServerApp.

See ``apps.py`` for the apps and their run config, ``server.py`` for the Flower strategy
that wraps ours, ``client.py`` for the client's turn (the simulation's own code path).
"""

from lightning_fed.deploy.client import ClientLoop, ClientRunner
from lightning_fed.deploy.server import FederatedServer

__all__ = ["ClientLoop", "ClientRunner", "FederatedServer"]
