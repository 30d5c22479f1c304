"""The server-strategy contract: pure tensor code over named state dicts.

A strategy never touches the Trainer, the transport or the disk. It is given the global
shared state and the clients' updates (all ``dict[str, Tensor]`` keyed by parameter name)
and returns the next global state. The same object therefore runs inside
:class:`~lightning_fed.callbacks.FederatedLoop` and inside a Flower ``ServerApp``.

Some server algorithms also change what a client does locally (FedProx's proximal term,
SCAFFOLD's control variates). That client-side half is a :class:`LocalCorrection`, built by
the strategy from what the server sends down and what the client remembers, and applied
to the gradients by whoever runs the local steps.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from lightning_fed.state import StateDict, compute_dtype


class AggregationError(ValueError):
    """An update cannot be aggregated (wrong keys, wrong shapes, non-finite values)."""


@dataclass
class ClientUpdate:
    """What one client uploads after its local training.

    Attributes:
        client_id: Index of the client in the federation.
        num_examples: Size of the client's local training set, ``|D_k|``.
        state: The client's shared parameters after local training (not a delta).
        extras: Algorithm-specific named tensors (e.g. SCAFFOLD's control-variate delta).
        metrics: Scalar training metrics of the client, for logging only.
    """

    client_id: int
    num_examples: int
    state: StateDict
    extras: StateDict = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


class LocalCorrection:
    """Client-side part of a server algorithm, applied to gradients during local steps.

    The default does nothing. Subclasses override :meth:`correct_gradients` (called once per
    optimizer step, after the backward pass and before clipping), :meth:`after_optimizer_step`
    (called once per optimizer step, after it) and :meth:`finish` (called once when the
    client's local training ends, returns extras to upload).
    """

    def correct_gradients(self, params: Mapping[str, torch.nn.Parameter]) -> None:
        """Modify ``p.grad`` in place for the shared parameters ``params``."""

    def after_optimizer_step(self, params: Mapping[str, torch.nn.Parameter], lr: float) -> None:
        """Modify the shared parameters in place after an optimizer step taken with ``lr``."""

    def finish(self, params: Mapping[str, Tensor], num_steps: int, lr: float) -> StateDict:
        """Return the extras to upload with the update (empty by default)."""
        return {}


def check_update(global_state: Mapping[str, Tensor], update: ClientUpdate) -> None:
    """Raise :class:`AggregationError` if ``update`` cannot be aggregated with ``global_state``.

    Checks, in order: the keys match exactly, every shape matches, every value is finite.
    """
    cid = update.client_id
    missing = sorted(set(global_state) - set(update.state))
    unexpected = sorted(set(update.state) - set(global_state))
    if missing or unexpected:
        raise AggregationError(
            f"client {cid}: update keys do not match the global state"
            f" (missing={missing[:5]}, unexpected={unexpected[:5]})"
        )
    bad_shapes = [
        f"{k}: {tuple(update.state[k].shape)} != {tuple(v.shape)}"
        for k, v in global_state.items()
        if update.state[k].shape != v.shape
    ]
    if bad_shapes:
        raise AggregationError(f"client {cid}: shape mismatch for {bad_shapes[:5]}")
    for name, tensors in (("state", update.state), ("extras", update.extras)):
        non_finite = [k for k, t in tensors.items() if not torch.isfinite(t).all()]
        if non_finite:
            raise AggregationError(f"client {cid}: non-finite values in {name} {non_finite[:5]}")
    if update.num_examples <= 0 or not math.isfinite(update.num_examples):
        raise AggregationError(f"client {cid}: num_examples must be > 0, got {update.num_examples}")


def weighted_average(
    states: Sequence[Mapping[str, Tensor]],
    weights: Sequence[float],
    *,
    cast_back: bool = True,
) -> StateDict:
    """``sum_k w_k * state_k / sum_k w_k`` per key, computed in float32 (or wider).

    Args:
        states: The states to average, all with the keys of ``states[0]``.
        weights: One non-negative weight per state.
        cast_back: Cast each result to the dtype of ``states[0]``; ``False`` keeps the
            float32-or-wider accumulator, so callers can keep computing without rounding.
    """
    if len(states) == 0:
        raise AggregationError("cannot average an empty list of states")
    if len(states) != len(weights):
        raise AggregationError(f"got {len(states)} states but {len(weights)} weights")
    total = float(sum(weights))
    if total <= 0:
        raise AggregationError(f"weights must sum to a positive number, got {list(weights)}")
    out: StateDict = {}
    for key, ref in states[0].items():
        acc = torch.zeros_like(ref, dtype=compute_dtype(ref.dtype))
        for state, w in zip(states, weights):
            acc.add_(state[key].to(acc.dtype), alpha=float(w) / total)
        out[key] = acc.to(ref.dtype) if cast_back else acc
    return out


class Strategy(ABC):
    """A server aggregation rule.

    Lifecycle: :meth:`setup` once with the initial global state and the number of clients;
    then each round, for each sampled client, :meth:`downlink` (extra tensors sent with the
    global state) and :meth:`local_correction` (client side); finally :meth:`aggregate`.

    Attributes:
        secure_sum: ``True`` for a strategy under which the server only ever holds the sum of
            the clients' updates (secure aggregation); the run's privacy report reads it.
    """

    secure_sum: ClassVar[bool] = False

    def setup(self, global_state: Mapping[str, Tensor], num_clients: int) -> None:
        """Initialise server-side state (moments, controls) for ``global_state``'s keys."""
        self.num_clients = num_clients

    def client_model(self, client_id: int, global_state: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
        """The shared state ``client_id`` starts its local training from.

        The global state by default; a personalized strategy (e.g. FedAMP) returns the
        client's own aggregate, a clustered one (FedBiscuit) only its cluster's keys. The
        client trains the keys it receives and uploads exactly those keys; only they count
        as downloaded and uploaded bytes.
        """
        return global_state

    def downlink(self, client_id: int) -> StateDict:
        """Extra named tensors sent to ``client_id`` besides the global state (none by default)."""
        return {}

    def local_correction(
        self, global_state: Mapping[str, Tensor], downlink: Mapping[str, Tensor], client_memory: dict[str, Tensor]
    ) -> LocalCorrection:
        """The client-side correction for one client's local training.

        Args:
            global_state: The shared state the client starts from.
            downlink: What :meth:`downlink` sent to this client.
            client_memory: Tensors this client keeps between rounds (owned by the client;
                the strategy may read and update them in place, e.g. SCAFFOLD's ``c_i``).
        """
        return LocalCorrection()

    @abstractmethod
    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """Return the next global state from the current one and the valid updates."""

    def state_dict(self) -> dict[str, Any]:
        """Server-side state needed to resume exactly (tensors allowed)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
