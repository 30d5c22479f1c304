"""Dirichlet label skew over groups of rows that must stay on one client.

FedBis' SHP setting (Wu et al., 2024, arXiv:2407.03038, Sec. 6 and Table 5) splits the
data over 200 clients by Dirichlet(0.3) on the 18 domains "ensuring that no questions overlap
between clients": SHP holds several answer pairs per question, so the draw is made over
questions (``post_id``), each labelled by its domain, and every question's rows follow it.
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets
import numpy as np

from lightning_fed.datamodules.partition import Dirichlet, _column, _unique, check_partition


@dataclass(frozen=True)
class GroupedDirichlet(Dirichlet):
    """:class:`~lightning_fed.datamodules.partition.Dirichlet` over groups (``group`` column).

    ``min_size`` counts groups. Every group must have one value of ``key``.

    Attributes:
        group: Column naming the group of a row (SHP: ``post_id``).
    """

    group: str = "post_id"

    def __call__(self, ds: datasets.Dataset, num_clients: int, seed: int) -> list[list[int]]:
        _, codes = _unique(_column(ds, self.group, self), self.group, self)
        labels = _column(ds, self.key, self)
        first = np.full(codes.max() + 1, -1)
        first[codes[::-1]] = np.arange(len(codes))[::-1]  # first row of each group
        mixed = labels[first][codes] != labels
        if mixed.any():
            row = int(np.flatnonzero(mixed)[0])
            raise ValueError(
                f"partition {self!r}: {self.group} {ds[row][self.group]!r} has more than one {self.key!r} value"
            )
        groups = datasets.Dataset.from_dict({self.key: labels[first].tolist()})
        parts = super().__call__(groups, num_clients, seed)
        client_of_group = np.empty(len(first), dtype=np.int64)
        for client, members in enumerate(parts):
            client_of_group[members] = client
        rows = client_of_group[codes]
        return check_partition(
            [np.flatnonzero(rows == k).tolist() for k in range(num_clients)], num_clients, repr(self)
        )
