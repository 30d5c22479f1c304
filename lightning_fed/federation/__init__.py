"""The round engine: client sampling, per-round randomness, client state, the round-hook contract."""

from lightning_fed.federation.hooks import RoundHook
from lightning_fed.federation.sampling import ClientTurn, derive_seed, sample_clients
from lightning_fed.federation.store import ClientStateStore

__all__ = ["ClientStateStore", "ClientTurn", "RoundHook", "derive_seed", "sample_clients"]
