"""FedBuff (Nguyen et al., 2022, "Federated Learning with Buffered Asynchronous Aggregation",
AISTATS, arXiv:2106.06639, Algorithm 1).

Clients train asynchronously, each from whatever server model was current when it started.
The server adds every arriving update to a buffer, discounted by its staleness ``tau`` (the
number of server steps taken since the client started), and steps once ``K`` updates are in:

    ``Delta_bar <- Delta_bar + s(tau) Delta_k``, ``s(tau) = 1 / sqrt(1 + tau)``;
    when ``K`` are buffered: ``x <- x + eta_g Delta_bar / K``, version ``+1``, buffer cleared.

(The paper writes ``Delta_k = y_start - y_end`` and steps ``x - eta_g Delta_bar / K``; here
``Delta_k = y_end - y_start`` and the sign is folded in.) Which model a client started from is
the caller's to know: the loop (or the virtual clock,
:class:`~lightning_fed.heterogeneity.AsyncRoundSimulator`) passes ``start_state`` and
``start_version`` to :meth:`FedBuff.submit`. In a synchronous loop, :meth:`FedBuff.aggregate`
submits the round's updates with staleness 0 (with ``K`` = the round size it is FedAvg with
uniform weights and a server learning rate). The buffer, its count and the version are in
:meth:`FedBuff.state_dict`, so a run resumed between two flushes loses nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from lightning_fed.option_rules import FEDBUFF, check
from lightning_fed.state import StateDict, compute_dtype
from lightning_fed.strategies.base import AggregationError, ClientUpdate, Strategy


def staleness_weight(tau: int, rule: str = "sqrt") -> float:
    """``s(tau) = 1 / sqrt(1 + tau)`` (``"sqrt"``, the paper's choice) or 1 (``"constant"``)."""
    if tau < 0:
        raise ValueError(f"staleness must be >= 0, got {tau}")
    return 1.0 / math.sqrt(1.0 + tau) if rule == "sqrt" else 1.0


class FedBuff(Strategy):
    """Buffered asynchronous aggregation with staleness-discounted updates.

    Args:
        buffer_size: ``K``, updates per server step.
        server_lr: ``eta_g``.
        staleness: ``"sqrt"`` (``1 / sqrt(1 + tau)``) or ``"constant"`` (no discount).
        max_staleness: Updates staler than this are dropped (counted in :attr:`dropped`);
            ``None`` keeps all.
    """

    def __init__(
        self, buffer_size: int = 10, server_lr: float = 1.0, staleness: str = "sqrt", max_staleness: int | None = None
    ) -> None:
        check(FEDBUFF, buffer_size=buffer_size, server_lr=server_lr, staleness=staleness, max_staleness=max_staleness)
        self.buffer_size, self.server_lr, self.staleness = buffer_size, float(server_lr), staleness
        self.max_staleness = max_staleness
        self.version = 0  # server steps taken
        self.buffered = 0  # updates in the buffer
        self.buffer: StateDict = {}  # sum of s(tau) Delta_k
        self.dropped = 0  # updates refused for staleness
        # Asynchronous use (lightning_fed.heterogeneity.AsyncArrivals): the model of each version a
        # client still trains from, and the version each assigned client started from.
        self.models: dict[int, StateDict] = {}
        self.start_versions: dict[int, int] = {}

    def submit(
        self,
        global_state: Mapping[str, Tensor],
        update: ClientUpdate,
        start_state: Mapping[str, Tensor],
        start_version: int,
    ) -> StateDict | None:
        """Buffer one arriving update; the next global state if it filled the buffer, else ``None``.

        Args:
            global_state: The current server model (version :attr:`version`).
            update: The client's trained state.
            start_state: The model the client started from.
            start_version: That model's version; ``tau = version - start_version``.
        """
        tau = self.version - int(start_version)
        if tau < 0:
            raise AggregationError(
                f"client {update.client_id}: start version {start_version} is ahead of {self.version}"
            )
        if self.max_staleness is not None and tau > self.max_staleness:
            self.dropped += 1
            return None
        missing = sorted(set(global_state) ^ set(update.state))
        if missing:
            raise AggregationError(
                f"client {update.client_id}: update keys do not match the global state {missing[:5]}"
            )
        s = staleness_weight(tau, self.staleness)
        for k, y in update.state.items():
            x0 = start_state[k]
            delta = (y.to(compute_dtype(y.dtype)) - x0.to(compute_dtype(x0.dtype))) * s
            self.buffer[k] = delta if k not in self.buffer else self.buffer[k] + delta
        self.buffered += 1
        return self.flush(global_state) if self.buffered >= self.buffer_size else None

    def flush(self, global_state: Mapping[str, Tensor]) -> StateDict:
        """``x + eta_g Delta_bar / K``; the version advances and the buffer empties."""
        out: StateDict = {}
        for k, x in global_state.items():
            x32 = x.to(compute_dtype(x.dtype))
            step = self.buffer.get(k, torch.zeros_like(x32)) * (self.server_lr / self.buffer_size)
            out[k] = (x32 + step).to(x.dtype)
        self.version += 1
        self.buffered = 0
        self.buffer = {}
        return out

    # ------------------------------------------------------------ asynchronous use in a loop
    def remember(self, global_state: Mapping[str, Tensor]) -> None:
        """Keep the current version's model (clients dispatched now train from it)."""
        if self.version not in self.models:
            self.models[self.version] = {k: v.detach().clone() for k, v in global_state.items()}

    def assign(self, client_id: int, start_version: int) -> None:
        """``client_id``'s next update was trained from version ``start_version`` (kept by :meth:`remember`)."""
        if start_version not in self.models:
            raise AggregationError(f"client {client_id}: no model of version {start_version} is kept")
        self.start_versions[client_id] = int(start_version)

    def keep_versions(self, versions: set[int]) -> None:
        """Forget the models of versions no running client needs any more."""
        self.models = {v: m for v, m in self.models.items() if v in versions}

    def client_model(self, client_id: int, global_state: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
        """The model the client trains from: its assigned version's, else the current one."""
        v = self.start_versions.get(client_id)
        return global_state if v is None or v == self.version else self.models[v]

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """Submit each update with the version it started from (:meth:`assign`; unassigned: the
        current one, staleness 0: the synchronous use).

        Returns the state after the last flush this call caused (``global_state`` itself if the
        buffer did not fill; the updates stay buffered for the next call).
        """
        current: Mapping[str, Tensor] = global_state
        version = self.version
        for u in updates:
            start_version = self.start_versions.pop(u.client_id, version)
            start = global_state if start_version == version else self.models[start_version]
            new = self.submit(current, u, start, start_version)
            if new is not None:
                current = new
        return {k: v.clone() for k, v in current.items()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "buffered": self.buffered,
            "buffer": {k: v.clone() for k, v in self.buffer.items()},
            "dropped": self.dropped,
            "models": {str(v): {k: t.clone() for k, t in m.items()} for v, m in self.models.items()},
            "start_versions": {str(c): v for c, v in self.start_versions.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.version = int(state.get("version", self.version))
        self.buffered = int(state.get("buffered", self.buffered))
        self.buffer = {k: v.clone() for k, v in state.get("buffer", {}).items()}
        self.dropped = int(state.get("dropped", self.dropped))
        models = state.get("models", {})
        self.models = {int(v): {k: t.clone() for k, t in m.items()} for v, m in models.items()}
        self.start_versions = {int(c): int(v) for c, v in state.get("start_versions", {}).items()}
