"""Partitioners: split one data set's rows into per-client shards.

Each partitioner is a small, deterministic callable
``(ds, num_clients, seed) -> list[list[int]]`` returning each client's row indices,
sorted. They cover the usual federated settings: IID, label skew by a Dirichlet draw
(Hsu et al., 2019, arXiv:1909.06335), one client per key value (e.g. per author or task),
quantity/feature skew by sorting on a score, and an explicit ``client`` column as the
synthetic sets carry.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import datasets
import numpy as np
import pyarrow as pa

from lightning_fed.data_cross_rules import no_key_value


class Partitioner(ABC):
    """Splits a data set's rows into ``num_clients`` non-empty, disjoint shards."""

    @abstractmethod
    def __call__(self, ds: datasets.Dataset, num_clients: int, seed: int) -> list[list[int]]:
        """Row indices of each client, each list sorted.

        Args:
            ds: The records to split.
            num_clients: Number of clients.
            seed: Seed of any random draw; the same seed gives the same partition.

        Raises:
            ValueError: If a column is missing or invalid, or a client would be empty.
        """


@dataclass(frozen=True)
class IID(Partitioner):
    """A shuffled split into shards whose sizes differ by at most one."""

    def __call__(self, ds: datasets.Dataset, num_clients: int, seed: int) -> list[list[int]]:
        _check_num_clients(num_clients, self)
        order = np.random.default_rng(seed).permutation(len(ds))
        return check_partition(_sorted_lists(np.array_split(order, num_clients)), num_clients, repr(self))


@dataclass(frozen=True)
class Dirichlet(Partitioner):
    """Label skew: each value of ``key`` is split over clients by proportions ~ Dir(alpha).

    Small ``alpha`` concentrates each value on few clients; large ``alpha`` approaches IID.
    The proportions are redrawn (at most ``max_attempts`` times) until every client has at
    least ``min_size`` rows.

    Attributes:
        alpha: Concentration of the Dirichlet distribution, > 0.
        key: Column whose values are the labels.
        min_size: Fewest rows any client may get.
        max_attempts: Draws tried before giving up.
    """

    alpha: float
    key: str
    min_size: int = 1
    max_attempts: int = 100

    def __post_init__(self) -> None:
        if not (isinstance(self.alpha, (int, float)) and math.isfinite(self.alpha) and self.alpha > 0):
            raise ValueError(f"partition dirichlet: `alpha` must be a finite number > 0, got {self.alpha!r}")
        if not isinstance(self.min_size, int) or self.min_size < 1:
            raise ValueError(f"partition dirichlet: `min_size` must be an integer >= 1, got {self.min_size!r}")
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ValueError(f"partition dirichlet: `max_attempts` must be an integer >= 1, got {self.max_attempts!r}")

    def __call__(self, ds: datasets.Dataset, num_clients: int, seed: int) -> list[list[int]]:
        _check_num_clients(num_clients, self)
        if len(ds) < num_clients * self.min_size:
            raise ValueError(
                f"partition {self!r}: {len(ds)} rows cannot give {num_clients} clients {self.min_size} each"
            )
        _, codes = _unique(_column(ds, self.key, self), self.key, self)
        rng = np.random.default_rng(seed)
        per_value = [rng.permutation(np.flatnonzero(codes == c)) for c in range(codes.max() + 1)]
        concentration = np.full(num_clients, float(self.alpha))
        for _ in range(self.max_attempts):
            shards: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
            for rows in per_value:
                cuts = (np.cumsum(rng.dirichlet(concentration)) * len(rows)).astype(int)[:-1]
                for client, chunk in enumerate(np.split(rows, cuts)):
                    shards[client].append(chunk)
            parts = [np.concatenate(chunks) for chunks in shards]
            if min(len(p) for p in parts) >= self.min_size:
                return check_partition(_sorted_lists(parts), num_clients, repr(self))
        raise ValueError(
            f"partition {self!r}: no draw in {self.max_attempts} gave every one of {num_clients} "
            f"clients >= {self.min_size} rows; raise alpha, or lower num_clients or min_size"
        )


class TooFewKeys(ValueError):
    """:class:`ByKey` over fewer distinct values of its column ``key`` than clients; ``values``: those
    values, sorted."""

    def __init__(self, message: str, key: str, values: list) -> None:
        super().__init__(message)
        self.key, self.values = key, values


class MissingValue(ValueError):
    """A row without a value (missing or null; a text empty or of whitespace only or a NaN: no ``ByKey``
    key, ``value``) in the column ``column`` a partitioner assigns rows by; ``row``: the first such row (from 0)."""

    def __init__(self, message: str, column: str, row: int, value: object = None) -> None:
        super().__init__(message)
        self.column, self.row, self.value = column, row, value


@dataclass(frozen=True)
class ByKey(Partitioner):
    """One client per value of ``key``; more values than clients are grouped (value i to client i % num_clients).

    The distinct values, in sorted order, go round the clients: value ``i`` goes to client
    ``i % num_clients``, so with more values than clients a client holds several (the data module
    says which in a warning at setup); fewer values than clients are refused (:class:`TooFewKeys`).

    Attributes:
        key: Column whose values name the natural clients (author, task, domain...).
    """

    key: str

    def __call__(self, ds: datasets.Dataset, num_clients: int, seed: int) -> list[list[int]]:
        _check_num_clients(num_clients, self)
        column = _column(ds, self.key, self)
        keys = column.tolist()
        if (row := next((i for i, v in enumerate(keys) if no_key_value(v)), None)) is not None:
            # an empty text or a NaN is no key (red team 16 B3, 17 B3): the precheck's line (data_columns)
            raise MissingValue(f"partition {self!r}: row {row} has no {self.key!r} value", self.key, row, keys[row])
        values, codes = _unique(column, self.key, self)
        if num_clients > len(values):
            raise TooFewKeys(
                f"partition {self!r}: {len(values)} distinct values of {self.key!r} cannot fill "
                f"{num_clients} clients; use num_clients <= {len(values)}",
                self.key,
                values.tolist(),
            )
        clients = codes % num_clients
        parts = [np.flatnonzero(clients == k) for k in range(num_clients)]
        return check_partition(_sorted_lists(parts), num_clients, repr(self))

    def groups(self, ds: datasets.Dataset, num_clients: int) -> list[list[Any]]:
        """The distinct values of ``key`` each of ``num_clients`` clients holds, as :meth:`__call__`
        assigns them (call it after: it reads the column without checking it again)."""
        values, _ = _unique(_column(ds, self.key, self), self.key, self)
        return [values[k::num_clients].tolist() for k in range(num_clients)]


@dataclass(frozen=True)
class SortedShards(Partitioner):
    """Contiguous shards of the rows sorted by a numeric ``score`` (ties by row index).

    Attributes:
        score: Numeric column to sort by (e.g. a length or a difficulty score).
    """

    score: str

    def __call__(self, ds: datasets.Dataset, num_clients: int, seed: int) -> list[list[int]]:
        _check_num_clients(num_clients, self)
        values = _column(ds, self.score, self)
        if not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
            raise ValueError(f"partition {self!r}: column {self.score!r} must be numeric, got {values.dtype}")
        if np.issubdtype(values.dtype, np.floating) and np.isnan(values).any():
            row = int(np.flatnonzero(np.isnan(values))[0])
            raise ValueError(f"partition {self!r}: row {row} has no {self.score!r} score")
        order = np.lexsort((np.arange(len(values)), values))
        return check_partition(_sorted_lists(np.array_split(order, num_clients)), num_clients, repr(self))


@dataclass(frozen=True)
class ByColumn(Partitioner):
    """The data set says which client each row belongs to, as integers ``0..num_clients-1``.

    Attributes:
        column: Column holding the client index (the synthetic sets' ``client``).
    """

    column: str = "client"

    def __call__(self, ds: datasets.Dataset, num_clients: int, seed: int) -> list[list[int]]:
        _check_num_clients(num_clients, self)
        values = _column(ds, self.column, self)
        if values.dtype == object or not np.issubdtype(values.dtype, np.number):
            # A JSON column mixing 0 and "zero" comes back as JSON text ('0', '"zero"'): name the
            # row whose value is not an integer even once decoded (else row 0's '0' is blamed).
            def decoded(v: object) -> object:
                try:
                    return json.loads(v) if isinstance(v, str) else v
                except ValueError:
                    return v

            row = next(
                (
                    i
                    for i, v in enumerate(values)
                    if not isinstance(decoded(v), (int, np.integer)) or isinstance(decoded(v), bool)
                ),
                None,
            )
            found = f"row {row} has {decoded(values[row])!r}" if row is not None else f"got text such as {values[0]!r}"
            raise ValueError(f"partition {self!r}: column {self.column!r} must hold client integers; {found}")
        invalid = (values < 0) | (values >= num_clients) | (values != np.floor(values))
        if invalid.any():
            row = int(np.flatnonzero(invalid)[0])
            raise ValueError(
                f"partition {self!r}: row {row} has {self.column} {values[row].item()!r}, "
                f"not an integer in 0..{num_clients - 1}"
            )
        clients = values.astype(np.int64)
        parts = [np.flatnonzero(clients == k) for k in range(num_clients)]
        return check_partition(_sorted_lists(parts), num_clients, repr(self))


PARTITIONERS: dict[str, type[Partitioner]] = {
    "iid": IID,
    "dirichlet": Dirichlet,
    "by_key": ByKey,
    "sorted_shards": SortedShards,
    "by_column": ByColumn,
}


def check_partition(parts: list[list[int]], num_clients: int, description: str) -> list[list[int]]:
    """Check that a partition has ``num_clients`` shards and none is empty.

    Args:
        parts: Row indices of each client.
        num_clients: Expected number of clients.
        description: What made the partition, for the error message.

    Returns:
        ``parts``, unchanged.

    Raises:
        ValueError: Naming the first empty client, or the wrong number of shards.
    """
    if len(parts) != num_clients:
        raise ValueError(f"partition {description}: {len(parts)} shards for {num_clients} clients")
    for client, rows in enumerate(parts):
        if len(rows) == 0:
            raise ValueError(f"partition {description}: client {client} got no examples")
    return parts


def _check_num_clients(num_clients: int, partitioner: Partitioner) -> None:
    if not isinstance(num_clients, (int, np.integer)) or num_clients < 1:
        raise ValueError(f"partition {partitioner!r}: `num_clients` must be an integer >= 1, got {num_clients!r}")


def _column(ds: datasets.Dataset, name: str, partitioner: Partitioner) -> np.ndarray:
    """One column as a NumPy array, through Arrow (fast even on shuffled/selected sets)."""
    if name not in ds.column_names:
        raise ValueError(f"partition {partitioner!r}: no column {name!r} (columns: {', '.join(ds.column_names)})")
    column = ds.with_format("arrow")[name]
    if isinstance(column, pa.Table):
        column = column.column(0)
    if column.null_count:
        row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise MissingValue(f"partition {partitioner!r}: row {row} has no {name!r} value", name, row)
    return column.to_numpy()


def _unique(values: np.ndarray, name: str, partitioner: Partitioner) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and each row's index into them."""
    try:
        return np.unique(values, return_inverse=True)
    except TypeError as error:  # mixed, unorderable types in an object column
        raise ValueError(f"partition {partitioner!r}: values of {name!r} cannot be sorted ({error})") from None


def _sorted_lists(parts: list[np.ndarray]) -> list[list[int]]:
    return [np.sort(p).tolist() for p in parts]
