"""The figures of ``lightning-fed report`` (matplotlib, PNG), one set per comparable table.

- ``metric``: the metric per evaluated round, one line per group (the example-weighted mean over
  clients, averaged over the group's runs) and a band from the 10th to the 90th percentile over
  clients (each run's percentiles from ``rounds.jsonl``, averaged over the runs); round 0 is the
  evaluation before round 1.
- ``clients``: the per-client final values of each group (every run's clients), a box plot with
  the points strewn over it.
- ``bytes``: cumulative bytes per round, up (solid) and down (dashed), averaged over the runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lightning_fed.report.table import Row, lower_is_better

DPI = 110


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def _mean_by_round(series: list[dict[int, float]]) -> tuple[list[int], list[float]]:
    rounds = sorted(set().union(*series)) if series else []
    return rounds, [float(np.mean([s[r] for s in series if r in s])) for r in rounds]


def metric_per_round(rows: list[Row], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, row in enumerate(rows):
        color = f"C{i % 10}"
        rounds, mean = _mean_by_round([r.round_metric(row.metric) for r in row.runs])
        lo_r, lo = _mean_by_round([r.round_metric(row.metric, "client_p10") for r in row.runs])
        hi_r, hi = _mean_by_round([r.round_metric(row.metric, "client_p90") for r in row.runs])
        ax.plot(rounds, mean, marker="o", color=color, label=f"{row.group} (n={len(row.runs)})")
        if lo_r == hi_r and lo_r:
            ax.fill_between(lo_r, lo, hi, color=color, alpha=0.2, linewidth=0)
    metric = rows[0].metric
    ax.set_xlabel("round (0 = before round 1)")
    ax.set_ylabel(f"{metric} ({'lower' if lower_is_better(metric) else 'higher'} is better)")
    ax.set_title(f"{metric} per round: mean, band p10-p90 over clients")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def clients_final(rows: list[Row], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.5, 1.8 * len(rows) + 2), 4.0))
    values = [[v for r in row.runs for v in r.client_values(row.metric).values()] for row in rows]
    ax.boxplot(values, showfliers=False, widths=0.5, medianprops={"color": "black"})
    rng = np.random.default_rng(0)  # the same jitter every time: the figure is reproducible
    for i, vals in enumerate(values, start=1):
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(vals)), vals, s=16, color=f"C{(i - 1) % 10}", zorder=3)
    ax.set_xticks(range(1, len(rows) + 1), [_wrap(r.group) for r in rows], fontsize=8)
    ax.set_ylabel(f"final {rows[0].metric} per client")
    ax.set_title("final value per client, all runs of a group")
    ax.grid(alpha=0.3, axis="y")
    return _save(fig, path)


def cumulative_bytes(rows: list[Row], path: Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, row in enumerate(rows):
        color = f"C{i % 10}"
        for key, style in (("up_bytes", "-o"), ("down_bytes", "--x")):
            series = [
                dict(zip([x["round"] for x in r.rounds], np.cumsum([x.get(key, 0) for x in r.rounds]) / 1e6))
                for r in row.runs
            ]
            rounds, mean = _mean_by_round(series)
            # markers keep groups with equal traffic (same shared state) visible on top of each other
            size = 9 - (3 * i) % 7
            ax.plot(rounds, mean, style, color=color, markersize=size, label=f"{row.group} {key.split('_')[0]}")
    ax.set_xlabel("round")
    ax.set_ylabel("cumulative MB (all clients)")
    ax.set_title("bytes per round, cumulative: up (solid), down (dashed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def _wrap(text: str) -> str:
    return text.replace(", ", "\n")


def _save(fig, path: Path) -> Path:
    from matplotlib.ticker import MaxNLocator

    if fig.axes[0].get_xlabel().startswith("round"):
        fig.axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    fig.clf()
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


FIGURES = {"metric": metric_per_round, "clients": clients_final, "bytes": cumulative_bytes}
"""Name -> function drawing it for one table's rows into a PNG file."""
