"""A user's own strategy, defined outside the package (the registry test installs it through an entry
point, as a plugin package would; its objective is in ``tests/modules/plugin_objective.py``)."""

from collections.abc import Sequence

from lightning_fed.strategies import ClientUpdate, FedAvg


class ClientIdWeightedAvg(FedAvg):
    """FedAvg with the weighting replaced through the documented ``weights()`` extension point."""

    def weights(self, updates: Sequence[ClientUpdate]) -> list[float]:
        weights = [float(u.client_id + 1) for u in updates]
        print(f"ClientIdWeightedAvg weights {weights}", flush=True)
        return weights
