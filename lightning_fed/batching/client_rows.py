"""Which client each row of a batched step belongs to, and each client's own loss.

While a group of clients trains together (:mod:`lightning_fed.batching.batched_turns`), each
step's batch is the clients' own batches concatenated, and :class:`ClientRows` says which slot
of the group (0..K-1) each row belongs to. The adapted layers read it to apply each client's
LoRA factors to its rows (:mod:`~lightning_fed.batching.multi_lora`); a module that opts in
(``batchable = True``) reduces its loss per client with :func:`client_mean` or
:func:`client_token_mean`: each client's loss exactly as its sequential turn reduces it, summed
over clients (their parameters are disjoint, so each client's gradient is its own loss's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

#: The module attribute that holds the current step's :class:`ClientRows` (``None``: sequential).
ROWS_ATTR = "batched_rows"


@dataclass
class ClientRows:
    """The rows of one batched step.

    Attributes:
        slots: ``(N,)`` the group slot (0..K-1) of each row of the batch.
        size: K, the clients of the group.
        losses: Each slot's loss of this step (detached), set by the module's reduction.
        per_client: ``n`` when the rows are ``n`` rows of slot 0, then ``n`` of slot 1, ... (every
            client's batch of the same size, in slot order: the usual step); ``None`` otherwise.
    """

    slots: Tensor
    size: int
    losses: list[Tensor | None] = field(default_factory=list)
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


def rows_of(module: Any) -> ClientRows | None:
    """The current batched step's rows of ``module``, or ``None`` when it trains one client."""
    return getattr(module, ROWS_ATTR, None)


def client_mean(values: Tensor, rows: ClientRows) -> Tensor:
    """``sum_k mean(values[rows of k])``: each client's mean over its own rows (its sequential
    step's loss), summed; records each client's value in ``rows.losses``."""
    onehot = _onehot(rows.slots, rows.size, values.dtype)  # (N, K)
    per_client = (values.unsqueeze(-1) * onehot).sum(0) / onehot.sum(0).clamp(min=1)
    rows.losses = list(per_client.detach())
    return per_client.sum()


def client_token_mean(values: Tensor, mask: Tensor, rows: ClientRows) -> Tensor:
    """``sum_k sum(values * mask over k's rows) / count(mask over k's rows)``: a token-level mean
    per client (cross-entropy's ``mean`` over the client's scored tokens), summed over clients."""
    onehot = _onehot(rows.slots, rows.size, values.dtype)
    m = mask.to(values.dtype)
    total = (values * m).sum(-1) @ onehot  # (K,)
    count = m.sum(-1) @ onehot
    per_client = total / count  # a client with no scored token gives NaN, as F.cross_entropy does
    rows.losses = list(per_client.detach())
    return per_client.sum()


def _onehot(slots: Tensor, size: int, dtype: torch.dtype) -> Tensor:
    return torch.nn.functional.one_hot(slots, size).to(dtype)
