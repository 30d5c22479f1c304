"""The round engine: the server's half of a round, one client's turn, the round-hook contract,
client sampling and per-round randomness, client state, update screening and the run's report."""

from lightning_fed.federation.driver import TurnDriver, find_driver
from lightning_fed.federation.hooks import Payload, Replies, RoundHook
from lightning_fed.federation.report import RoundReport
from lightning_fed.federation.sampling import check_clients_per_round, derive_seed, sample_clients
from lightning_fed.federation.server_round import ServerRound
from lightning_fed.federation.store import ClientStateStore
from lightning_fed.federation.turn import ClientTurn, TurnPlan, turn_batches
from lightning_fed.run_config import FederationConfig

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
