"""Screening of client updates before aggregation: reject or clip what is too large.

:func:`~lightning_fed.strategies.check_update` already rejects updates with the wrong keys,
wrong shapes or non-finite values. A finite but scaled update (a poisoned client multiplying
its change by 1e6) passes that check; :class:`UpdateScreen` bounds the L2 norm of the change
``w_k - w`` over all shared tensors. Either such an update is rejected like a malformed
one, or its change is scaled down to the bound (the clipping of Sun et al., 2019, "Can You
Really Backdoor Federated Learning?"). Both the in-process loop and the Flower server use it.

The rejection's reason names the client and its norm; a private run (differential privacy on)
writes and logs neither (:data:`PRIVATE_REJECTION` instead, see
:meth:`~lightning_fed.federation.server_round.ServerRound.reject`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from torch import Tensor

from lightning_fed.run_options import LARGE_UPDATE_MODES as MODES  # noqa: F401 - the run's option
from lightning_fed.strategies.base import AggregationError, ClientUpdate

#: What a private run says of a rejected update: neither the client nor its norm (a per-client
#: figure of its data that no epsilon covers); the run's total is in ``summary.json``'s faults.
PRIVATE_REJECTION = "an update was rejected (a private run names neither the client nor its norm)"


def update_norm(received: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> float:
    """The L2 norm of ``state - received`` over every tensor, computed in float32 or wider."""
    total = 0.0
    for k, start in received.items():
        delta = state[k].double() - start.double()
        total += float(delta.pow(2).sum())
    return math.sqrt(total)


class UpdateScreen:
    """Bounds the norm of each client's change.

    Args:
        max_norm: Largest allowed L2 norm of ``w_k - w`` (``None``: no bound).
        mode: ``reject`` the update, or ``clip`` its change to ``max_norm``.
    """

    def __init__(self, max_norm: float | None = None, mode: str = "reject") -> None:
        if max_norm is not None and not max_norm > 0:
            raise ValueError(f"federation.max_update_norm must be > 0, got {max_norm}")
        if mode not in MODES:
            raise ValueError(f"federation.on_large_update must be one of {MODES}, got {mode!r}")
        self.max_norm, self.mode = max_norm, mode

    def __call__(self, received: Mapping[str, Tensor], update: ClientUpdate) -> tuple[ClientUpdate, bool]:
        """The update to aggregate and whether it was clipped; raises ``AggregationError`` to reject."""
        if self.max_norm is None:
            return update, False
        norm = update_norm(received, update.state)
        if norm <= self.max_norm:
            return update, False
        if self.mode == "reject":
            raise AggregationError(
                f"client {update.client_id}: update norm {norm:.4g} exceeds federation.max_update_norm={self.max_norm}"
            )
        scale = self.max_norm / norm
        clipped = {
            k: (received[k].double() + (v.double() - received[k].double()) * scale).to(v.dtype)
            for k, v in update.state.items()
        }
        return replace(update, state=clipped), True
