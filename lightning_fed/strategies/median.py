"""Coordinate-wise median (Yin et al., 2018, "Byzantine-Robust Distributed Learning: Towards
Optimal Statistical Rates", ICML, arXiv:1803.01498, Definition 1 / Algorithm "median-GD").

The server replaces every coordinate of the global model by the median of that coordinate
over the clients' models. One client can move the result at most to the edge of the honest
clients' values, however far it scales its update, as long as fewer than half of the
clients are Byzantine.

Weights: the median is **unweighted**, as in the paper: every participating client counts
once, whatever its ``|D_k|`` (``ClientUpdate.num_examples`` is ignored). Weighting by data
size would let one client that claims a huge ``|D_k|`` decide the result alone, which is
what a robust rule must prevent.

With an even number of clients the median of a coordinate is the mean of its two middle
values (the usual statistical definition, so the rule is symmetric in the clients);
``torch.median`` would return the lower one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from lightning_fed.state import StateDict, compute_dtype
from lightning_fed.strategies.base import AggregationError, ClientUpdate, Strategy, check_update


def stack_updates(global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate], name: str) -> dict[str, Tensor]:
    """Each key of ``global_state`` -> the clients' values stacked on a new first dim, ``(K, ...)``.

    Values are in :func:`~lightning_fed.state.compute_dtype`, on CPU.

    Args:
        global_state: The current global state; its keys and shapes are the reference.
        updates: The clients' updates.
        name: The strategy's name, for error messages.

    Raises:
        AggregationError: If there is no update, or one does not match ``global_state``
            (keys, shapes) or holds non-finite values.
    """
    if len(updates) == 0:
        raise AggregationError(f"{name}: cannot aggregate zero updates")
    for update in updates:
        check_update(global_state, update)
    return {
        key: torch.stack([u.state[key].detach().to("cpu", compute_dtype(ref.dtype)) for u in updates])
        for key, ref in global_state.items()
    }


def coordinate_median(stacked: Tensor) -> Tensor:
    """Median over dim 0 of ``(K, ...)``; the mean of the two middle values when ``K`` is even."""
    k = stacked.shape[0]
    ordered = stacked.sort(dim=0).values
    if k % 2 == 1:
        return ordered[k // 2]
    return 0.5 * (ordered[k // 2 - 1] + ordered[k // 2])


class CoordinateMedian(Strategy):
    """Coordinate-wise median of the clients' parameters (unweighted).

    Example:
        >>> import torch
        >>> x = {"w": torch.zeros(2)}
        >>> ups = [ClientUpdate(i, 1, {"w": torch.tensor(v)})
        ...        for i, v in enumerate(([1.0, 5.0], [2.0, -1.0], [1e6, 0.0]))]
        >>> CoordinateMedian().aggregate(x, ups)["w"]
        tensor([2., 0.])
    """

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """The coordinate-wise median of ``updates``, in the dtype of ``global_state``, on CPU.

        Raises:
            AggregationError: If ``updates`` is empty or an update does not match
                ``global_state``.
        """
        stacked = stack_updates(global_state, updates, type(self).__name__)
        return {key: coordinate_median(stacked[key]).to(x.dtype) for key, x in global_state.items()}
