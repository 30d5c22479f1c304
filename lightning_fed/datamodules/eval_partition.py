"""Assign evaluation rows to the training clients: a separate validation or test set, a client's own
validation fraction (:func:`split_validation`), the groups of evaluation rows (:func:`group_ids`).

A client's test rows must come from the same client as its training rows: with
:class:`~lightning_fed.datamodules.ByKey` the same key value goes to the same client (the
training data fixes which client holds which value); with
:class:`~lightning_fed.datamodules.ByColumn` the column names the client. Partitioners
without a notion of identity (IID, Dirichlet, sorted shards) split the evaluation rows by
themselves, with the same settings and seed. Unlike training, a client may get no
evaluation rows (it is then not evaluated), but not every client may be empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import datasets
import numpy as np
import torch

from lightning_fed.data_cross_rules import missing_key_line, no_key_value, row_line, unheld_key_line
from lightning_fed.datamodules.partition import IID, ByColumn, ByKey, Partitioner
from lightning_fed.errors import UserError
from lightning_fed.federation.sampling import derive_seed


def split_validation(items: list[Any], val_fraction: float, seed: int, client_id: int) -> tuple[list, list]:
    """``(train, val)`` of one client's rows: a seeded ``val_fraction`` of them for validation
    (at least one row when the fraction is positive and the client has two or more)."""
    n_val = int(round(val_fraction * len(items)))
    if val_fraction > 0 and len(items) >= 2:
        n_val = max(1, n_val)
    g = torch.Generator().manual_seed(derive_seed(seed, client_id, 7))
    order = torch.randperm(len(items), generator=g).tolist()
    return [items[i] for i in order[n_val:]], [items[i] for i in order[:n_val]]


def group_ids(records: datasets.Dataset, group_key: str | None, group_names: list[str]) -> list[int] | None:
    """Each evaluation row's group id: the index of its ``group_key`` value (default: a ``group``
    column if there is one) in ``group_names``, which a new value is appended to; ``None``
    without a group column."""
    key = group_key or ("group" if "group" in records.column_names else None)
    if key is None:
        return None
    if key not in records.column_names:
        raise ValueError(f"data.group_key: no column {key!r} (columns: {', '.join(records.column_names)})")
    ids = []
    for value in records[key]:
        name = str(value)
        if name not in group_names:
            group_names.append(name)
        ids.append(group_names.index(name))
    return ids


def source_columns(ds: datasets.Dataset, field_map: Mapping[str, str] | None) -> list[str]:
    """The columns of ``ds`` as its file names them: a field ``field_map`` read from another column named
    as that column (red team 16 B4: an evaluation set's were listed as ``prompt, chosen, rejected``)."""
    return [field_map.get(c, c) if field_map else c for c in ds.column_names]


def _values(
    ds: datasets.Dataset,
    column: str,
    option: str,
    field: str,
    source: str,
    key: bool = False,
    field_map: Mapping[str, str] | None = None,
) -> np.ndarray:
    """The values of ``column`` (named by the partition's ``option``) of the evaluation set ``source``
    (given as ``field``, its columns renamed by ``field_map``), each row holding one (``key``: ``ByKey``'s,
    where an empty text is none)."""
    if column not in ds.column_names:  # the precheck's line (data_columns._clients_problem)
        raise UserError(
            f"{field} {source!r} has no column {column!r} ({option}) to assign its rows to clients by"
            f" (columns: {', '.join(source_columns(ds, field_map))})"
        )
    values = np.asarray(ds[column], dtype=object)
    # ByKey's key: an empty text or a NaN is no value either (red team 16 B3, 17 B3), as for training
    missing = [i for i, v in enumerate(values) if (no_key_value if key else _is_none)(v)]
    if missing:  # the precheck's line (data_columns.data_columns_problem)
        row = missing[0]
        raise UserError(missing_key_line(option, column, field, source, row, row_line(source, row), value=values[row]))
    return values


def _is_none(value: Any) -> bool:
    return value is None


def by_key_clients(
    train: datasets.Dataset,
    evaluation: datasets.Dataset,
    key: str,
    num_clients: int,
    field: str,
    source: str,
    field_map: Mapping[str, str] | None = None,
) -> list[list[int]]:
    """Rows of ``evaluation`` (the file ``source``, given as ``field``, its columns renamed by ``field_map``)
    per client, each row going where its ``key`` value went in training (the partition refused a training
    row without one).

    Mirrors :class:`~lightning_fed.datamodules.ByKey`: training value ``i`` (sorted) is client
    ``i % num_clients``.

    Raises:
        UserError: If an evaluation row has a value no training row has, naming it, its row and ``source``.
    """
    train_values = sorted(set(train[key]))
    client_of = {v: i % num_clients for i, v in enumerate(train_values)}
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    for row, value in enumerate(
        _values(evaluation, key, "data.partition.key", field, source, True, field_map).tolist()
    ):
        if value not in client_of:  # the precheck's line (data_columns.data_columns_problem)
            raise UserError(unheld_key_line(field, source, row, row_line(source, row), key, value, train_values))
        parts[client_of[value]].append(row)
    return parts


def by_column_clients(
    evaluation: datasets.Dataset,
    column: str,
    num_clients: int,
    field: str,
    source: str,
    field_map: Mapping[str, str] | None = None,
) -> list[list[int]]:
    """Rows of ``evaluation`` per client, read from an integer client ``column``."""
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    values = _values(evaluation, column, "data.partition.column", field, source, field_map=field_map)
    for row, value in enumerate(values.tolist()):
        if not isinstance(value, (int, np.integer)) or not 0 <= value < num_clients:
            raise UserError(
                f"{field} {source!r}: row {row} has {column} {value!r}, not a client in 0..{num_clients - 1}"
            )
        parts[int(value)].append(row)
    return parts


def iid_clients(evaluation: datasets.Dataset, num_clients: int, seed: int) -> list[list[int]]:
    """A seeded shuffle dealt round-robin (clients may be left empty when rows are few)."""
    order = np.random.default_rng(seed).permutation(len(evaluation))
    return [sorted(order[k::num_clients].tolist()) for k in range(num_clients)]


def evaluation_clients(
    partition: Partitioner | None,
    train: datasets.Dataset,
    evaluation: datasets.Dataset,
    num_clients: int,
    seed: int,
    field: str,
    source: str,
    field_map: Mapping[str, str] | None = None,
) -> list[list[int]]:
    """Each client's rows of a separate evaluation set (see the module docstring).

    Args:
        partition: ``data.partition`` (``None``: the ``client`` column if the evaluation set
            has one, else IID, as for training).
        train: The training records (they fix ByKey's value -> client map).
        evaluation: The validation or test records.
        num_clients: Number of clients.
        seed: Seed of partitioners that draw.
        field: The config field of the evaluation set, for error messages.
        source: The evaluation set as given (its file), for error messages.
        field_map: How ``evaluation``'s columns were renamed from its file's (``None``: not renamed),
            for error messages: they list the file's own columns.

    Raises:
        UserError: If a row cannot be assigned, or no client gets a row: one line naming ``field``
            and ``source``.
    """
    if isinstance(partition, ByKey):
        parts = by_key_clients(train, evaluation, partition.key, num_clients, field, source, field_map)
    elif isinstance(partition, ByColumn):
        parts = by_column_clients(evaluation, partition.column, num_clients, field, source, field_map)
    elif partition is None:
        if "client" in evaluation.column_names:
            parts = by_column_clients(evaluation, "client", num_clients, field, source)
        else:
            parts = iid_clients(evaluation, num_clients, seed)
    elif isinstance(partition, IID):
        parts = iid_clients(evaluation, num_clients, seed)
    else:
        try:
            parts = partition(evaluation, num_clients, seed)
        except ValueError as err:
            raise UserError(f"{field} {source!r}: {err}") from None
    if not any(parts):
        raise UserError(f"{field} {source!r}: no rows for any client")
    return parts
