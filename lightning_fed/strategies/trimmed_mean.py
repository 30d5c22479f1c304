"""Coordinate-wise trimmed mean (Yin et al., 2018, "Byzantine-Robust Distributed Learning:
Towards Optimal Statistical Rates", ICML, arXiv:1803.01498, Definition 2 / Algorithm
"trimmed-mean-GD").

For every coordinate, the server sorts the ``K`` clients' values, drops the ``b`` largest
and the ``b`` smallest, ``b = floor(trim * K)``, and averages the ``K - 2b`` left. With at
most ``b`` Byzantine clients, each coordinate of the result lies within the range of the
honest clients' values.

Weights: the trimmed mean is **unweighted**, as in the paper: every kept value counts once,
whatever its client's ``|D_k|`` (``ClientUpdate.num_examples`` is ignored), so a client
cannot buy influence by claiming a large data set. ``trim=0`` is therefore the uniform mean,
``FedAvg(weighting="uniform")``.

Too few clients: when ``trim > 0`` but ``floor(trim * K) == 0`` (e.g. ``trim=0.2`` with 4
updates), nothing would be trimmed and the rule would silently degrade to the plain mean,
losing the robustness it was chosen for. :meth:`TrimmedMean.aggregate` raises an
:class:`~lightning_fed.strategies.base.AggregationError` instead, naming ``trim``, the number
of updates and the number needed (``ceil(1 / trim)``). Sample at least that many clients per
round and set ``federation.min_clients`` to it, so a round with failed clients fails with the
loop's own message.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from torch import Tensor

from lightning_fed.option_rules import TRIMMED_MEAN, check
from lightning_fed.state import StateDict
from lightning_fed.strategies.base import AggregationError, ClientUpdate, Strategy
from lightning_fed.strategies.median import stack_updates


def trimmed_count(trim: float, num_updates: int) -> int:
    """``b = floor(trim * K)``: values dropped at each end of every coordinate.

    A tiny tolerance keeps exact products exact (``0.29 * 100`` is ``28.999...`` in floats).
    """
    return math.floor(trim * num_updates + 1e-9)


class TrimmedMean(Strategy):
    """Coordinate-wise ``trim``-trimmed mean of the clients' parameters (unweighted).

    Args:
        trim: ``beta``, the fraction of the clients' values dropped at *each* end of every
            coordinate, in ``[0, 0.5)``.

    Example:
        >>> import torch
        >>> x = {"w": torch.zeros(1)}
        >>> ups = [ClientUpdate(i, 1, {"w": torch.tensor([v])}) for i, v in enumerate((1.0, 2.0, 3.0, 1e6))]
        >>> TrimmedMean(trim=0.25).aggregate(x, ups)["w"]  # drops 1 and 1e6
        tensor([2.5000])
    """

    def __init__(self, trim: float = 0.1) -> None:
        check(TRIMMED_MEAN, trim=trim)  # lightning_fed/option_rules.py
        self.trim = float(trim)

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        """The coordinate-wise trimmed mean of ``updates``, in the dtype of ``global_state``, on CPU.

        Raises:
            AggregationError: If ``updates`` is empty, an update does not match
                ``global_state``, or ``trim > 0`` trims nothing from this many updates.
        """
        name = type(self).__name__
        k = len(updates)
        b = trimmed_count(self.trim, k)
        if self.trim > 0 and b == 0 and k > 0:
            needed = math.ceil(1 / self.trim - 1e-9)
            raise AggregationError(
                f"{name}: `trim`={self.trim} of {k} updates trims nothing (floor({self.trim} * {k}) = 0);"
                f" needs at least {needed} updates per round, or a larger `trim`"
            )
        stacked = stack_updates(global_state, updates, name)
        out: StateDict = {}
        for key, x in global_state.items():
            kept = stacked[key].sort(dim=0).values[b : k - b]
            out[key] = kept.mean(dim=0).to(x.dtype)
        return out
