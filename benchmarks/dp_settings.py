"""The DP settings the privacy benchmarks compare, as labels: ``no DP``, ``clip only``, ``eps <e>``.

Shared by ``privacy_utility.py`` and ``real_text/privacy_epsilon.py`` (records, tables, plots).
"""

from __future__ import annotations

import math
import statistics


def name(eps: float, clip_only: bool = False) -> str:
    """The label of a run: ``clip only`` (clipping, no measurable noise), ``no DP`` or ``eps <e>``."""
    return "clip only" if clip_only else ("no DP" if math.isinf(eps) else f"eps {eps:g}")


def label(record: dict, key: str) -> str:
    """A record's label, stored under ``key``; records written before it existed: from their epsilon."""
    return record.get(key) or name(record["target_epsilon"])


def order(setting: str) -> tuple[int, float]:
    """Sort key: no DP, clip only, then the epsilons from the largest."""
    return (0, 0.0) if setting == "no DP" else (1, 0.0) if setting == "clip only" else (2, -float(setting.split()[1]))


def axis_label(setting: str) -> str:
    """The setting as a plot's x tick: the epsilon, ``inf`` for no DP and clip only."""
    return {"no DP": "inf (no DP)", "clip only": "inf (clip only)"}.get(setting, setting[4:])


def fmt(values: list[float]) -> str:
    """``mean ± sd`` over seeds (the value alone for one seed)."""
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"
