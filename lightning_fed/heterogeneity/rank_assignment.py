"""Which LoRA rank each client trains: from a per-client list, a seeded distribution, or a data column.

Configuration is data (one dataclass, validated once); its fields are named as they will be in
a config file under the ``ClientRanks`` hook (:data:`SECTION`), and every error names the field
and the value:

.. code-block:: yaml

   init_args: {per_client: [4, 4, 8, 16]}                       # one rank per client
   init_args: {choices: [4, 8, 16], probabilities: [0.5, 0.3, 0.2], seed: 0}
   init_args: {column: device_rank}                             # each client's data says it

The rank scaling ``s = alpha / r`` of PEFT would make a rank-4 and a rank-16 client's ``B A``
mean different weight changes; :func:`alpha_for_rank` gives each client the ``alpha`` that
keeps ``s`` the same for all ranks (``alpha_r = r * alpha / r_max``), which the
heterogeneous-rank strategies assume.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_fed.federation.sampling import derive_seed
from lightning_fed.hook_rules import per_client_length_problem, rank_lists_problem

SECTION = "federation.hooks: ClientRanks"
"""How errors name these settings: the ``init_args`` of the ``ClientRanks`` hook."""
_RANK_TAG = 0x524B  # keeps these draws apart from the sampler's


@dataclass
class RankAssignment:
    """Each client's LoRA rank. Give exactly one of ``per_client``, ``choices`` or ``column``.

    Attributes:
        per_client: One rank per client, in client order.
        choices: Ranks to draw from, independently per client.
        probabilities: The probability of each of ``choices`` (uniform if omitted).
        seed: Seed of the draw from ``choices`` (the same seed gives the same ranks).
        column: A field of the data set whose value, the same for all of a client's
            examples, is that client's rank.
    """

    per_client: list[int] | None = None
    choices: list[int] | None = None
    probabilities: list[float] | None = None
    seed: int = 0
    column: str | None = None

    def __post_init__(self) -> None:
        lists = {"per_client": self.per_client, "choices": self.choices, "probabilities": self.probabilities}
        if problem := rank_lists_problem(
            SECTION, {**lists, "column": self.column}
        ):  # hook_rules.py: the precheck's too
            raise ValueError(problem)

    def ranks(self, num_clients: int, column_values: Sequence[Sequence[Any]] | None = None) -> list[int]:
        """The rank of each of ``num_clients`` clients.

        Args:
            num_clients: ``data.num_clients``.
            column_values: With ``column``: for each client, the values of that field in its
                examples (the data module's partition).

        Raises:
            ValueError: One line naming the field and the value that do not fit.
        """
        if self.per_client is not None:
            if problem := per_client_length_problem(SECTION, self.per_client, num_clients):  # the precheck's too
                raise ValueError(problem)
            return [int(r) for r in self.per_client]
        if self.choices is not None:
            rng = np.random.default_rng(derive_seed(self.seed, _RANK_TAG))
            picks = rng.choice(len(self.choices), size=num_clients, p=self.probabilities)
            return [int(self.choices[i]) for i in picks]
        if column_values is None or len(column_values) != num_clients:
            got = "none" if column_values is None else len(column_values)
            raise ValueError(f"{SECTION}.column={self.column!r}: needs the values of {num_clients} clients, got {got}")
        return [self.column_rank(client, values) for client, values in enumerate(column_values)]

    def column_rank(self, client: int, values: Sequence[Any]) -> int:
        """Client ``client``'s rank from the values of :attr:`column` in its examples.

        Raises:
            ValueError: The values are not one positive integer (one line naming the column, the
                client and up to three of its distinct values).
        """
        distinct = sorted(set(values), key=repr)
        if len(distinct) != 1 or not _is_rank(distinct[0]):
            shown = distinct[:3] if distinct else "no examples"
            raise ValueError(
                f"{SECTION}.column={self.column!r}: client {client} needs one positive integer rank, got {shown}"
            )
        return int(distinct[0])

    def missing_column(self, client: int, columns: Sequence[str]) -> str:
        """The one-line error of a client whose data has no :attr:`column`, listing the columns it has."""
        return (
            f"{SECTION}.column={self.column!r}: no such column in client {client}'s data"
            f" (its non-text columns: {', '.join(columns) or 'none'})"
        )


def alpha_for_rank(alpha: float, rank: int, max_rank: int) -> float:
    """``alpha_r = r * alpha / r_max``: PEFT's scaling ``alpha_r / r`` is then ``alpha / r_max`` for every rank."""
    if not 0 < rank <= max_rank:
        raise ValueError(f"rank must be in [1, {max_rank}], got {rank}")
    return alpha * rank / max_rank


def _is_rank(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0
