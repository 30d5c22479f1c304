"""What the papers' scripts share: their JSON-lines runs, the paired difference of a method
and its baseline with its error split into seed spread and test-set sampling, and the
verdict at 2 combined standard errors.

The error of a paired difference (same seeds, same test rows): the seed part is the SD of the
per-seed mean differences / sqrt(S) (0 with one seed); the sampling part is the SD over test
rows of the row differences averaged over seeds / sqrt(n) (the same rows in every seed, so no
1 / S); the combined SE is their root sum of squares. A difference is decided when it exceeds
twice that SE.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np


class Paired(NamedTuple):
    """Mean over seeds and rows of a - b, its combined SE, the SE's seed and sampling parts, seeds."""

    diff: float
    se: float
    se_seed: float
    se_sample: float
    seeds: int


def read_runs(paths: list[str | Path]) -> list[dict]:
    """Every run of these ``--out`` files (one JSON line a run)."""
    return [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.strip()]


def append_run(path: str | Path | None, run: dict) -> None:
    """Append one run to ``--out`` as it lands (nothing when ``path`` is None)."""
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(run) + "\n")


def by_method(results: list[dict], name=lambda r: r["method"]) -> dict[str, dict[int, dict]]:
    """Runs by method name, then by seed (a later run of the same method and seed wins)."""
    by: dict[str, dict[int, dict]] = {}
    for r in results:
        by.setdefault(name(r), {})[r["seed"]] = r
    return by


def sd(values) -> float:
    """Sample SD (ddof 1); 0 for a single value."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def paired(a: dict[int, list[float]], b: dict[int, list[float]]) -> Paired | None:
    """a - b over the seeds both have (seed -> one value a test row, the same rows in each)."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    d = np.array([np.array(a[s], dtype=float) - np.array(b[s], dtype=float) for s in seeds])  # (S, n)
    per_seed, per_row = d.mean(1), d.mean(0)
    se_seed = sd(per_seed) / np.sqrt(len(seeds))
    se_sample = float(per_row.std(ddof=1) / np.sqrt(d.shape[1]))
    return Paired(float(per_seed.mean()), float(np.hypot(se_seed, se_sample)), se_seed, se_sample, len(seeds))


def call(diff: float, se: float, above: str, below: str) -> str:
    """``above`` when diff > 2 SE, ``below`` when diff < -2 SE, else ``not separated``."""
    return above if diff > 2 * se else below if diff < -2 * se else "not separated"
