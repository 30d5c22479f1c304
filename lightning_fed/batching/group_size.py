"""How many clients train together (``federation.batch_clients``), and which.

``off``: one client after another (the default). An integer K: groups of up to K clients.
``auto``: the largest group the memory planner says fits
(:func:`lightning_fed.planning.group.run_group_size`, within 25% of the measured peak). A round's turns are
cut into groups in their order (:func:`group_turns`); a group holds turns of the same number of
batches only (every client of a group takes every step), so clients with different local step
counts (stragglers, ``local_epochs`` over different data sizes) train in different groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lightning_fed.federation.turn import TurnPlan


def group_turns(turns: Sequence[TurnPlan], size: int) -> tuple[tuple[TurnPlan, ...], ...]:
    """``turns`` in order, cut into groups of at most ``size`` turns of equal ``num_batches``."""
    groups: list[list[TurnPlan]] = []
    for turn in turns:
        last = groups[-1] if groups else None
        if last is not None and len(last) < size and last[0].num_batches == turn.num_batches:
            last.append(turn)
        else:
            groups.append([turn])
    return tuple(tuple(g) for g in groups)


def expected_clients(clients_per_round: int, sampling: str, rate: float | None, num_clients: int) -> int:
    """Clients a round trains: ``clients_per_round``, or about ``q N`` under Poisson sampling."""
    if sampling == "poisson" and rate is not None:
        return max(1, math.ceil(rate * num_clients))
    return clients_per_round
