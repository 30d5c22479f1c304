"""The figures of ``lightning-fed report`` (matplotlib, PNG), one set per comparable table.

- ``metric``: the metric per evaluated round, one line per group: the example-weighted mean over
  clients, averaged over the group's runs (its seeds), with error bars of ± one sample standard
  deviation over the seeds (groups of two runs or more) and a band from the 10th to the 90th
  percentile over clients (each run's percentiles from ``rounds.jsonl``, averaged over the runs);
  round 0 is the evaluation before round 1.
- ``clients``: the per-client final values of each group (every run's clients), a box plot with
  the points strewn over it.
- ``bytes``: cumulative bytes per round, averaged over the runs, up and down in two panels side by
  side (so that neither hides the other when they are equal).

Each group keeps its colour from report to report: the colour is chosen from the group's label
(:func:`colours`). A series that does not vary gets an axis from 0 to a little above it instead
of matplotlib's ± 4 % around a single value.
"""

from __future__ import annotations

import statistics
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from lightning_fed.report.table import Row, lower_is_better

DPI = 110
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
"""matplotlib's ``tab10`` colours, in its order."""


def colours(labels: Iterable[str]) -> dict[str, str]:
    """A colour per group label, the same in every report: the palette slot the label's CRC-32 names.

    Two labels of one report that name the same slot are told apart: in sorted order, the later one
    takes the next free slot (so only such a label's colour depends on the other groups). With more
    labels than colours, colours repeat.
    """
    out: dict[str, str] = {}
    taken: set[int] = set()
    for label in sorted(set(labels)):
        slot = zlib.crc32(label.encode("utf-8")) % len(PALETTE)
        while slot in taken and len(taken) < len(PALETTE):
            slot = (slot + 1) % len(PALETTE)
        taken.add(slot)
        out[label] = PALETTE[slot]
    return out


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def _by_round(series: list[dict[int, float]]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for s in series:
        for r, v in s.items():
            out.setdefault(r, []).append(v)
    return dict(sorted(out.items()))


def _mean_by_round(series: list[dict[int, float]]) -> tuple[list[int], list[float]]:
    values = _by_round(series)
    return list(values), [float(np.mean(v)) for v in values.values()]


def sane_limits(ax, values: Iterable[float]) -> None:
    """An axis from 0 to 5 % above a series that does not vary (0 to 1 for zeros), instead of
    matplotlib's ± 4 % around it (an accuracy of 1.0 drawn between 0.96 and 1.04); no offset
    notation on the ticks."""
    finite = [v for v in values if np.isfinite(v)]
    ax.ticklabel_format(axis="y", useOffset=False)
    if not finite:
        return
    low, high = min(finite), max(finite)
    if high - low > 1e-6 * max(1.0, abs(high)):
        return
    if high > 0:
        ax.set_ylim(0.0, 1.05 * high)
    elif high < 0:
        ax.set_ylim(1.05 * high, 0.0)
    else:
        ax.set_ylim(0.0, 1.0)


def metric_per_round(rows: list[Row]):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    palette, drawn, handles = colours(r.group for r in rows), [], []
    for row in rows:
        color = palette[row.group]
        per_round = _by_round([r.round_metric(row.metric) for r in row.runs])
        rounds = list(per_round)
        mean = [statistics.fmean(v) for v in per_round.values()]
        sd = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in per_round.values()]
        label = f"{row.group} (n={len(row.runs)})"
        if len(row.runs) > 1:
            handles.append(ax.errorbar(rounds, mean, yerr=sd, marker="o", color=color, capsize=3, label=label))
        else:
            handles += ax.plot(rounds, mean, marker="o", color=color, label=label)
        drawn += [m + s for m, s in zip(mean, sd)] + [m - s for m, s in zip(mean, sd)]
        lo_r, lo = _mean_by_round([r.round_metric(row.metric, "client_p10") for r in row.runs])
        hi_r, hi = _mean_by_round([r.round_metric(row.metric, "client_p90") for r in row.runs])
        if lo_r == hi_r and lo_r:
            ax.fill_between(lo_r, lo, hi, color=color, alpha=0.2, linewidth=0)
            drawn += lo + hi
    metric = rows[0].metric
    ax.set_xlabel("round (0 = before round 1)")
    ax.set_ylabel(f"{metric} ({'lower' if lower_is_better(metric) else 'higher'} is better)")
    ax.set_title(f"{metric} per round: mean ± sd over seeds, band p10-p90 over clients", fontsize=10)
    sane_limits(ax, drawn)
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, fontsize=8)  # in the table's order
    return fig


def clients_final(rows: list[Row]):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.5, 1.8 * len(rows) + 2), 4.0))
    palette = colours(r.group for r in rows)
    values = [[v for r in row.runs for v in r.client_values(row.metric).values()] for row in rows]
    ax.boxplot(values, showfliers=False, widths=0.5, medianprops={"color": "black"})
    rng = np.random.default_rng(0)  # the same jitter every time: the figure is reproducible
    for i, (row, vals) in enumerate(zip(rows, values), start=1):
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(vals)), vals, s=16, color=palette[row.group], zorder=3)
    ax.set_xticks(range(1, len(rows) + 1), [_wrap(r.group) for r in rows], fontsize=8)
    ax.set_ylabel(f"final {rows[0].metric} per client")
    ax.set_title("final value per client, all runs of a group")
    sane_limits(ax, [v for vals in values for v in vals])
    ax.grid(alpha=0.3, axis="y")
    return fig


def cumulative_bytes(rows: list[Row]):
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.0), sharey=True)
    palette, drawn = colours(r.group for r in rows), []
    for ax, key in zip(axes, ("up_bytes", "down_bytes")):
        for i, row in enumerate(rows):
            series = [
                dict(zip([x["round"] for x in r.rounds], np.cumsum([x.get(key, 0) for x in r.rounds]) / 1e6))
                for r in row.runs
            ]
            rounds, mean = _mean_by_round(series)
            # markers of different sizes keep groups with equal traffic (same shared state) visible
            size = 9 - (3 * i) % 7
            ax.plot(rounds, mean, "-o", color=palette[row.group], markersize=size, label=row.group)
            drawn += mean
        ax.set_xlabel("round")
        ax.set_title(f"{key.split('_')[0]}: cumulative, all clients")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("MB")
    sane_limits(axes[0], drawn)
    axes[0].legend(fontsize=8)
    return fig


def _wrap(text: str) -> str:
    return text.replace(", ", "\n")


def save(fig, path: Path) -> Path:
    """Write ``fig`` as a PNG file (integer ticks on round axes) and close it."""
    from matplotlib.ticker import MaxNLocator

    for ax in fig.axes:
        if ax.get_xlabel().startswith("round"):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    _pyplot().close(fig)
    return path


FIGURES: dict[str, Callable[[list[Row]], object]] = {
    "metric": metric_per_round,
    "clients": clients_final,
    "bytes": cumulative_bytes,
}
"""Name -> function drawing that figure for one table's rows (a matplotlib ``Figure``; :func:`save` writes it)."""
