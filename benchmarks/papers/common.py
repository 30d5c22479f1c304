"""What the papers' scripts share: their JSON-lines runs, and one error model for the paired
difference of a method and its baseline, with the verdict it supports.

The error model. ``d[s, i]`` is the method's score minus the baseline's on test item ``i`` in
seed ``s`` (the same items in every seed); the difference is the mean of ``d``. Its error has
two parts:

* **seed part**: the SD of the ``S`` per-seed means ``d[s].mean()`` / sqrt(S), with S - 1
  degrees of freedom (0 and no degrees of freedom with one seed);
* **sampling part**: the cluster-robust SE of the mean of ``e_i = d[:, i].mean()`` (the item
  differences averaged over seeds: the same items in every seed, so no 1 / S), clustered by the
  unit the claim is about (the task for a held-out-task claim; the client's task; the test
  sentence). With ``G`` clusters and ``n`` items,
  ``var = G / (G - 1) * sum_g (sum_{i in g} (e_i - mean e))^2 / n^2`` (CR1), with G - 1 degrees
  of freedom; for equal clusters that is the variance of the G cluster means / G, and with one
  item a cluster it is the plain ``Var(e) / n``. Items that share two units (a test pair of two
  sentences) are clustered two ways (Cameron, Gelbach and Miller 2011):
  ``var = V_a + V_b - V_ab``, with min(G_a, G_b) - 1 degrees of freedom.

The combined SE is their root sum of squares, and its degrees of freedom the
Welch-Satterthwaite ones, ``se^4 / (se_seed^4 / (S - 1) + se_sample^4 / (G - 1))``. A
difference is **decided** when |difference| exceeds the two-sided 97.5 % quantile of Student's
t at those degrees of freedom times the SE (``crit``): 12.7 with 1 df, 4.30 with 2, 2.45 with 6,
1.96 with infinitely many. With few seeds and a dominant seed part the bar rises: a fixed
"2 SE" passes by chance 18 % of the time at 2 df.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy import stats


class Paired(NamedTuple):
    """Mean of a - b, its combined SE and the SE's seed and sampling parts, the seeds, the
    clusters of the sampling part, the Welch-Satterthwaite df, the critical t, the per-seed means."""

    diff: float
    se: float
    se_seed: float
    se_sample: float
    seeds: int
    clusters: int
    df: float
    crit: float
    per_seed: tuple[float, ...]

    @property
    def k(self) -> float:
        """|diff| in combined SEs."""
        return abs(self.diff) / self.se if self.se > 0 else float("inf")

    def describe(self, unit: str = "", by: str = "clusters") -> str:
        """``+0.294 ± 0.108 (seed SE 0.103, sampling SE 0.034 over 4 tasks, 3 seeds; 2.7 SE, df 2.3, t 3.89)``."""
        return (
            f"{self.diff:+.3f} ± {self.se:.3f}{unit} (seed SE {self.se_seed:.3f}, sampling SE {self.se_sample:.3f} "
            f"over {self.clusters} {by}, {self.seeds} seed{'s' if self.seeds > 1 else ''}; "
            f"{self.k:.1f} SE, df {self.df:.1f}, t {self.crit:.2f})"
        )


def read_runs(paths: list[str | Path]) -> list[dict]:
    """Every run of these ``--out`` files (one JSON line a run)."""
    return [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line.strip()]


def commit() -> str | None:
    """``git rev-parse HEAD`` of the tree this script runs from (None outside a git checkout)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def append_run(path: str | Path | None, run: dict, args: dict | None = None) -> None:
    """Append one run to ``--out`` as it lands (nothing when ``path`` is None), with the
    script's ``args`` and the commit it ran from."""
    if path:
        extra = {"args": args} if args is not None else {}
        with open(path, "a") as f:
            f.write(json.dumps({**extra, "commit": commit(), **run}) + "\n")


def by_method(results: list[dict], name=lambda r: r["method"]) -> dict[str, dict[int, dict]]:
    """Runs by method name, then by seed. Two runs of the same method and seed are refused, not
    one silently kept: a rerun goes in its own file, and the docs say which one a figure reads."""
    by: dict[str, dict[int, dict]] = {}
    for r in results:
        runs = by.setdefault(name(r), {})
        if r["seed"] in runs:
            raise ValueError(f"two runs of {name(r)} seed {r['seed']}: keep one per file")
        runs[r["seed"]] = r
    return by


def sd(values) -> float:
    """Sample SD (ddof 1); 0 for a single value."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def blocks(n: int, per: int, count: int) -> list[int]:
    """The cluster of each of ``n`` items laid out as ``count`` consecutive blocks of ``per``
    (the recorded runs' test rows: tasks in sorted order, ``per`` rows each); refuses a count
    that does not match."""
    if n != per * count:
        raise ValueError(f"{n} test items are not {count} blocks of {per}")
    return [i // per for i in range(n)]


def cluster_var(e: np.ndarray, clusters) -> tuple[float, int]:
    """CR1 variance of the mean of ``e`` clustered by ``clusters``, and the count of clusters."""
    cl = np.asarray(clusters)
    groups = np.unique(cl)
    g = len(groups)
    if g < 2:
        raise ValueError("a clustered SE needs at least 2 clusters")
    r = e - e.mean()
    sums = np.array([r[cl == c].sum() for c in groups])
    return float(g / (g - 1) * (sums**2).sum() / len(e) ** 2), g


def sampling_se(e, clusters=None, clusters2=None) -> tuple[float, int]:
    """The sampling SE of the mean of ``e`` and the clusters whose count sets its df: one item a
    cluster (``clusters`` None), one-way, or two-way (``clusters2``) with the pair's cells."""
    e = np.asarray(e, dtype=float)
    if clusters is None:
        clusters = range(len(e))
    va, ga = cluster_var(e, list(clusters))
    if clusters2 is None:
        return float(np.sqrt(va)), ga
    vb, gb = cluster_var(e, list(clusters2))
    vab, _ = cluster_var(e, [f"{a}|{b}" for a, b in zip(clusters, clusters2)])
    v = va + vb - vab
    return float(np.sqrt(v if v > 0 else max(va, vb))), min(ga, gb)


def combine(diff: float, per_seed, se_sample: float, clusters: int) -> Paired:
    """The Paired figure from the per-seed means and the sampling SE over ``clusters`` clusters."""
    per_seed = tuple(float(x) for x in per_seed)
    s = len(per_seed)
    se_seed = sd(per_seed) / np.sqrt(s)
    se = float(np.hypot(se_seed, se_sample))
    parts = (se_seed**4 / (s - 1) if s > 1 else 0.0) + se_sample**4 / (clusters - 1)
    df = se**4 / parts if parts > 0 else float("inf")
    crit = float(stats.t.ppf(0.975, df)) if np.isfinite(df) else float(stats.norm.ppf(0.975))
    return Paired(float(diff), se, float(se_seed), float(se_sample), s, clusters, float(df), crit, per_seed)


def paired(a: dict[int, list[float]], b: dict[int, list[float]] | float, clusters=None, clusters2=None):
    """a - b over the seeds both have (seed -> one value a test item, the same items in each);
    ``b`` a number: a construction value every seed shares. ``clusters`` (``clusters2``): each
    item's unit(s) for the sampling part. None when no seed is common."""
    seeds = sorted(set(a) & set(b)) if isinstance(b, dict) else sorted(a)
    if not seeds:
        return None
    base = (lambda s: np.asarray(b[s], dtype=float)) if isinstance(b, dict) else (lambda s: float(b))
    d = np.array([np.asarray(a[s], dtype=float) - base(s) for s in seeds])  # (S, n)
    se_sample, g = sampling_se(d.mean(0), clusters, clusters2)
    return combine(float(d.mean()), d.mean(1), se_sample, g)


def call(p: Paired, above: str, below: str) -> str:
    """``above`` when diff > crit SE, ``below`` when diff < -crit SE, else ``not separated``."""
    return above if p.diff > p.crit * p.se else below if p.diff < -p.crit * p.se else "not separated"
