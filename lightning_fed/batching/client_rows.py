"""Which client each row of a step belongs to, and the loss each client trains on.

While a group of clients trains together (:mod:`lightning_fed.batching.batched_turns`), each
step's batch is the clients' own batches concatenated, and :class:`ClientRows` says which slot
of the group (0..K-1) each row belongs to; the adapted layers read it to apply each client's
LoRA factors to its rows (:mod:`~lightning_fed.batching.multi_lora`).

**The loss per client** (the module contract of ``batchable``, docs/developer/batching.md): a
module's ``training_step`` returns :func:`per_client_loss` of its per-row (or per-token) losses
and the batch's ``client_id`` column. It is one reduction for both paths: a sequential step's
batch holds one client, and the result is the plain mean; a batched step's holds K, and the result
is each client's mean over its own rows, summed over clients (their parameters are disjoint, so
each client's gradient is its own loss's). The per-client values travel in the step's output
(``client_ids``, ``client_losses``), which is how each turn records its own training loss.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

#: ``(B,)`` the packed row of each of the batch's rows while a forward runs over packed rows
#: (:func:`packed_rows`), else ``None``.
_PACKED: ContextVar[Tensor | None] = ContextVar("packed_rows", default=None)

#: The keys of a ``training_step`` output besides ``loss`` (Lightning passes them, detached, to
#: ``on_train_batch_end``): the step's clients and each one's loss, in the same order.
CLIENT_IDS, CLIENT_LOSSES = "client_ids", "client_losses"


@dataclass
class ClientRows:
    """The rows of one batched step.

    Attributes:
        slots: ``(N,)`` the group slot (0..K-1) of each row of the batch.
        size: K, the clients of the group.
        per_client: ``n`` when the rows are ``n`` rows of slot 0, then ``n`` of slot 1, ... (every
            client's batch of the same size, in slot order: the usual step); ``None`` otherwise.
    """

    slots: Tensor
    size: int
    per_client: int | None = None

    @classmethod
    def of(cls, slots: list[int], size: int, device: torch.device | None = None) -> ClientRows:
        """The rows of a step whose rows belong to ``slots`` (0..size-1)."""
        n, rest = divmod(len(slots), size)
        uniform = not rest and slots == [k for k in range(size) for _ in range(n)]
        return cls(torch.tensor(slots, device=device), size, per_client=n if uniform else None)

    def for_rows(self, n: int) -> Tensor:
        """The slots of a forward over ``n`` rows: the batch's rows, or ``m`` copies of them
        stacked (chosen then rejected, both orders of a pair: ``m * N`` rows)."""
        rows = self.slots.shape[0]
        if n == rows:
            return self.slots
        if n % rows:
            raise RuntimeError(f"a batched forward over {n} rows, which are not copies of the step's {rows} rows")
        return self.slots.repeat(n // rows)

    def layout(self, n: int) -> tuple[Tensor | None, int | None]:
        """``(slots, per_client)`` of a forward over ``n`` rows: ``per_client`` when the rows are
        ``m`` copies of equal segments of the clients in slot order (one batched matmul per factor,
        nothing gathered; ``slots`` then ``None``), else the slot of each of the ``n`` rows.

        Inside :func:`packed_rows` a forward over the packed rows' count is over packed rows: each
        row's slot is that of the batch rows packed into it, which must all be one client's."""
        packing = _PACKED.get()
        if packing is not None and n == int(packing[-1]) + 1 and n != self.slots.shape[0]:
            slots = torch.zeros(n, dtype=self.slots.dtype, device=self.slots.device)
            slots[packing] = self.slots
            if not bool((slots[packing] == self.slots).all()):
                raise RuntimeError("a packed row holds rows of more than one client")
            counts = torch.bincount(slots, minlength=self.size)
            per = int(counts[0])
            if self.per_client is not None and bool((counts == per).all()):
                return None, per  # sorted by slot: the rows are in the batch's order
            return slots, None
        if self.per_client is not None:
            if n % (self.size * self.per_client):
                raise RuntimeError(f"a batched forward over {n} rows, which are not copies of the step's rows")
            return None, self.per_client
        return self.for_rows(n), None


@contextmanager
def packed_rows(row_of: Tensor) -> Iterator[None]:
    """While a forward runs over packed rows: ``row_of`` ``(B,)`` (non-decreasing) is the packed row
    of each of the batch's rows, so the batching engine gives each packed row its rows' client."""
    token = _PACKED.set(row_of)
    try:
        yield
    finally:
        _PACKED.reset(token)


def per_client_loss(values: Tensor, client_ids: Tensor | None, mask: Tensor | None = None) -> dict[str, Any]:
    """A training step's output: each client's mean loss over its own rows, summed over the clients.

    Args:
        values: ``(N,)`` a loss per row, or ``(N, T)`` a loss per token with ``mask``.
        client_ids: ``(N,)`` the client of each row (the batch's ``client_id``); ``None``: one client.
        mask: ``(N, T)`` the scored tokens: each client's loss is then its token mean (cross-entropy's
            ``mean`` over the client's scored tokens; a client with none gives NaN, as
            ``F.cross_entropy`` does).

    Returns:
        ``{"loss": sum_k mean_k, "client_ids": (K,), "client_losses": (K,) detached}``; with one
        client ``loss`` is ``values.mean()`` (``values[mask].mean()``), the sequential step's loss.
    """
    if client_ids is None or client_ids.numel() == 0 or bool((client_ids == client_ids[0]).all()):
        loss = values.mean() if mask is None else values[mask].mean()
        ids = client_ids[:1] if client_ids is not None else torch.zeros(0, dtype=torch.long)
        return {"loss": loss, CLIENT_IDS: ids, CLIENT_LOSSES: loss.detach().reshape(1)}
    ids, slots = torch.unique(client_ids, return_inverse=True)
    if mask is None:
        sums, counts = values, torch.ones_like(values)
    else:  # a sum over the scored tokens only: a NaN elsewhere stays out of it, as values[mask] leaves it
        sums, counts = torch.where(mask.bool(), values, 0.0).sum(-1), mask.sum(-1).to(values.dtype)
    # Sums by index, not by a one-hot product: a client's NaN (a diverged client) stays in its own loss.
    zeros = values.new_zeros(len(ids))
    per_client = zeros.index_add(0, slots, sums) / zeros.index_add(0, slots, counts)
    return {"loss": per_client.sum(), CLIENT_IDS: ids, CLIENT_LOSSES: per_client.detach()}


def client_count(output: Any) -> int:
    """How many clients a step's output (:func:`per_client_loss`) reduced over (1 when it does not say)."""
    ids = output.get(CLIENT_IDS) if isinstance(output, dict) else None
    return max(int(ids.numel()), 1) if ids is not None else 1
