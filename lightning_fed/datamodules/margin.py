"""Reward-margin partition of FedPDPO's intra-domain setting (App. D.1.2).

"Samples are sorted by margin in descending order and partitioned into contiguous shards":
client 0 gets the easiest pairs (largest ``r_chosen - r_rejected``), the last client the
hardest. The margin comes from a column, from two score columns, or from a scorer applied
to ``(prompt, response)``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import datasets
import numpy as np

from lightning_fed.datamodules.partition import Partitioner, _check_num_clients, _column, _sorted_lists, check_partition

Scorer = Callable[[str, str], float]


def resolve_scorer(scorer: Scorer | str) -> Scorer:
    """A scorer given as a callable or as ``"package.module:function"``."""
    if callable(scorer):
        return scorer
    module, sep, attr = str(scorer).partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"partition scorer must be a callable or 'package.module:function', got {scorer!r}")
    fn = getattr(importlib.import_module(module), attr, None)
    if not callable(fn):
        raise ValueError(f"partition scorer {scorer!r}: {attr!r} is not a callable of {module!r}")
    return fn


@dataclass(frozen=True)
class RewardMarginShards(Partitioner):
    """Contiguous shards of the rows sorted by reward margin, largest first.

    Give exactly one source of the margin: ``score`` (a margin column), or
    ``chosen_score`` and ``rejected_score`` (e.g. IMDB-DPO's ``chosen_reward`` and
    ``rejected_reward``), or ``scorer`` (``f(prompt, response) -> float``, a callable or
    ``"package.module:function"``; the margin is ``f(x, y_w) - f(x, y_l)``).

    Attributes:
        score: Column holding the margin.
        chosen_score: Column holding the chosen response's reward.
        rejected_score: Column holding the rejected response's reward.
        scorer: Reward function of one response.
        descending: Largest margin first (the paper); ``False`` for smallest first.
    """

    score: str | None = None
    chosen_score: str | None = None
    rejected_score: str | None = None
    scorer: Any = None
    descending: bool = True

    def __post_init__(self) -> None:
        sources = [
            self.score is not None,
            self.chosen_score is not None or self.rejected_score is not None,
            self.scorer is not None,
        ]
        if sum(sources) != 1:
            raise ValueError(
                "partition reward_margin: give exactly one of `score`, `chosen_score`+`rejected_score`, `scorer`,"
                f" got {self!r}"
            )
        if sources[1] and (self.chosen_score is None or self.rejected_score is None):
            raise ValueError(f"partition reward_margin: `chosen_score` and `rejected_score` go together, got {self!r}")

    def margins(self, ds: datasets.Dataset) -> np.ndarray:
        """The reward margin of every row, as float64."""
        if self.score is not None:
            values = _column(ds, self.score, self)
        elif self.chosen_score is not None:
            values = _column(ds, self.chosen_score, self).astype(np.float64) - _column(ds, self.rejected_score, self)
        else:
            fn = resolve_scorer(self.scorer)
            rows = ds.select_columns(["prompt", "chosen", "rejected"]).to_list()
            values = np.array(
                [float(fn(r["prompt"], r["chosen"])) - float(fn(r["prompt"], r["rejected"])) for r in rows]
            )
        values = np.asarray(values, dtype=np.float64)
        if np.isnan(values).any():
            raise ValueError(f"partition {self!r}: row {int(np.flatnonzero(np.isnan(values))[0])} has no margin")
        return values

    def __call__(self, ds: datasets.Dataset, num_clients: int, seed: int) -> list[list[int]]:
        _check_num_clients(num_clients, self)
        margin = self.margins(ds)
        key = -margin if self.descending else margin
        order = np.lexsort((np.arange(len(margin)), key))  # ties by row index
        return check_partition(_sorted_lists(np.array_split(order, num_clients)), num_clients, repr(self))
