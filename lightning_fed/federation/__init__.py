"""The round engine: the server's half of a round, one client's turn, the round-hook contract,
client sampling and per-round randomness, client state, update screening and the run's report.

The names below are imported on first use (PEP 562), not with the package: the CLI checks a
resumed checkpoint with :mod:`~lightning_fed.federation.early_check` before Lightning is imported,
and importing any submodule imports this package first."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "TurnDriver": "driver",
    "find_driver": "driver",
    "Payload": "hooks",
    "Replies": "hooks",
    "RoundHook": "hooks",
    "RoundReport": "report",
    "check_clients_per_round": "sampling",
    "derive_seed": "sampling",
    "sample_clients": "sampling",
    "ServerRound": "server_round",
    "ClientStateStore": "store",
    "ClientTurn": "turn",
    "TurnPlan": "turn",
    "turn_batches": "turn",
}

__all__ = [
    "ClientStateStore",
    "ClientTurn",
    "FederationConfig",
    "Payload",
    "Replies",
    "RoundHook",
    "RoundReport",
    "ServerRound",
    "TurnDriver",
    "TurnPlan",
    "check_clients_per_round",
    "derive_seed",
    "find_driver",
    "sample_clients",
    "turn_batches",
]


def __getattr__(name: str) -> Any:
    if name == "FederationConfig":
        from lightning_fed.run_config import FederationConfig

        return FederationConfig
    if name in _WHERE:
        value = getattr(importlib.import_module(f"lightning_fed.federation.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
