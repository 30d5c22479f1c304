"""The comparison table of ``lightning-fed report``: one row per group of runs.

Runs are first split into *comparable sets*: the same data (data module, dataset and its
arguments), the same model (backbone) and the same evaluation set (validation/test data and
which clients are evaluated). Each set gets its own table (the largest first), and every table after the first
says in one line how its runs differ from the first's. Within a set, runs are grouped by the
``--by`` fields (``method,partition`` by default); the runs of a group are its seeds.

Per run: the final metric overall (the example-weighted mean of ``summary.json`` ``final.val``),
its per-client min, 10th percentile and median (the last evaluated round's Parquet file;
percentiles interpolate linearly, as :func:`~lightning_fed.federation.client_stats.distribution`),
the gain over the evaluation before round 1 (sign turned for losses, so that a positive gain is an
improvement; a run without that evaluation is compared with the mean of its group's runs that
have one), the bytes sent up and down over all rounds, the mean seconds of a round, the largest
privacy epsilon reported, and the ``test`` metric when ``lightning-fed test`` ran. Per group: the
mean and the sample standard deviation over its runs (``n - 1``; none for a single run) and, up
to :data:`PER_CLIENT_MAX` evaluated clients, each client's final value averaged over the runs.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightning_fed.report.runs import Run, describe_value

DEFAULT_METRICS = ("pref_acc", "accuracy", "rougeL", "token_acc", "loss")
"""The metric reported when ``--metric`` is not given: the first of these that every run has."""

COMPARABLE = {
    "data": ("data.class_path", "dataset", "synthetic_args", "field_map", "split", "template", "system_prompt"),
    "model": ("backbone",),
    "evaluation set": ("val_dataset", "val_fraction", "val_split", "test_dataset", "federation.eval_clients"),
}
"""What makes two runs comparable: config keys under ``data.init_args`` / ``model.init_args``
(or a full dotted key), per aspect."""


def lower_is_better(metric: str) -> bool:
    return "loss" in metric or "perplexity" in metric


def _key(run: Run, aspect: str) -> tuple[tuple[str, str], ...]:
    section = "model" if aspect == "model" else "data"
    out = []
    for name in COMPARABLE[aspect]:
        cfg = run.config
        if "." in name:
            head, *rest = name.split(".")
            value: Any = cfg.get(head) or {}
            for part in rest:
                value = value.get(part) if isinstance(value, dict) else None
        else:
            value = ((cfg.get(section) or {}).get("init_args") or {}).get(name)
        out.append((name, describe_value(value)))
    return tuple(out)


def comparable_key(run: Run) -> tuple:
    return tuple(_key(run, aspect) for aspect in COMPARABLE)


def difference(run: Run, reference: Run) -> str:
    """One line: how ``run``'s data, model or evaluation set differs from ``reference``'s."""
    for aspect in COMPARABLE:
        for (name, a), (_, b) in zip(_key(run, aspect), _key(reference, aspect)):
            if a != b:
                return f"different {aspect} from table 1: {name} {a} (table 1: {b})"
    return "same data, model and evaluation set as table 1"


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between the sorted values (NumPy's default, as the run's own statistics)."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


@dataclass
class Stat:
    """Mean and sample standard deviation over a group's runs (``sd`` is ``None`` for one value)."""

    values: list[float]

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def sd(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None

    def text(self, digits: int = 3) -> str:
        if not self.values:
            return "-"
        mean = f"{self.mean:.{digits}f}"
        return mean if self.sd is None else f"{mean} ± {self.sd:.{digits}f}"


@dataclass
class Row:
    """One group of runs and its figures."""

    group: str
    runs: list[Run]
    metric: str
    stats: dict[str, Stat] = field(default_factory=dict)
    epsilon: float | None = None

    @property
    def seeds(self) -> str:
        return ",".join(str(r.seed) for r in self.runs)

    def per_client(self) -> dict[int, float]:
        """Each client's final value, averaged over the runs that evaluated it."""
        values: dict[int, list[float]] = {}
        for run in self.runs:
            for client, value in run.client_values(self.metric).items():
                values.setdefault(client, []).append(value)
        return {c: statistics.fmean(v) for c, v in sorted(values.items())}


PER_CLIENT_MAX = 8
"""Up to this many evaluated clients, the Markdown table lists each client's final value too."""

COLUMNS = {
    "final": "final",
    "client_min": "client min",
    "client_p10": "client p10",
    "client_median": "client median",
    "initial": "round 0",
    "gain": "gain",
    "test": "test",
    "up_mb": "up MB",
    "down_mb": "down MB",
    "round_seconds": "s per round",
}


def run_figures(run: Run, metric: str) -> dict[str, float | None]:
    """The figures of one run (see the module docstring)."""
    final = ((run.summary.get("final") or {}).get("val") or {}).get(metric)
    initial = ((run.summary.get("initial") or {}).get("val") or {}).get(metric)
    clients = list(run.client_values(metric).values())
    test = (run.stages.get("test") or {}).get("metrics", {}).get(metric)
    sign = -1.0 if lower_is_better(metric) else 1.0
    seconds = [float(r["seconds"]) for r in run.rounds if isinstance(r.get("seconds"), (int, float))]
    return {
        "final": final,
        "client_min": min(clients) if clients else None,
        "client_p10": percentile(clients, 10) if clients else None,
        "client_median": percentile(clients, 50) if clients else None,
        "initial": initial,
        "gain": sign * (final - initial) if final is not None and initial is not None else None,
        "test": test,
        "up_mb": float(run.summary.get("total_up_bytes", 0)) / 1e6,
        "down_mb": float(run.summary.get("total_down_bytes", 0)) / 1e6,
        "round_seconds": statistics.fmean(seconds) if seconds else None,
    }


def group_rows(runs: list[Run], by: list[str], metric: str) -> list[Row]:
    """One :class:`Row` per distinct value of the ``by`` fields, in the order runs first show them."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        label = ", ".join(run.field(name) if len(by) == 1 else f"{name}={run.field(name)}" for name in by)
        groups.setdefault(label, []).append(run)
    rows = []
    for label, members in groups.items():
        figures = [run_figures(r, metric) for r in members]
        # A run without an evaluation before round 1 (e.g. `num_sanity_val_steps: 0` on all seeds
        # but one, as benchmarks/real_text/run.py does: the base model is the same for every seed)
        # gets its gain against the mean round 0 of the group's runs that have one.
        known = [f["initial"] for f in figures if f["initial"] is not None]
        sign = -1.0 if lower_is_better(metric) else 1.0
        for f in figures:
            if f["gain"] is None and known and f["final"] is not None:
                f["gain"] = sign * (f["final"] - statistics.fmean(known))
        stats = {k: Stat([f[k] for f in figures if f[k] is not None]) for k in COLUMNS}
        eps = [e for e in (r.epsilon() for r in members) if e is not None]
        rows.append(Row(label, members, metric, stats, max(eps) if eps else None))
    return rows


def repeated_seeds(rows: list[Row]) -> list[str]:
    """One line per group that holds two runs with the same seed (runs that differ in a config key
    the ``--by`` fields leave out): its spread is then not over seeds alone."""
    lines = []
    for row in rows:
        for i, run in enumerate(row.runs):
            if not isinstance(run.seed, int) or isinstance(run.seed, bool):
                continue  # unseeded runs each draw their own seed
            twin = next((o for o in row.runs[:i] if o.seed == run.seed), None)
            if twin is not None:
                keys = run.config_difference(twin)
                shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
                shown = shown or "a config that was not recorded"
                lines.append(
                    f"group {row.group!r}: seed {run.seed} twice ({twin.path} and {run.path} differ in {shown}):"
                    " its ± is not over seeds alone; add the key to --by"
                )
    return lines


def markdown(rows: list[Row]) -> str:
    """The rows as a Markdown table (mean ± sd over the runs of each group)."""
    show = [k for k in COLUMNS if any(r.stats[k].values for r in rows)]
    has_eps = any(r.epsilon is not None for r in rows)
    clients = [r.per_client() for r in rows]
    few = all(0 < len(c) <= PER_CLIENT_MAX for c in clients)
    head = ["group", "runs", "seeds", "metric", *(COLUMNS[k] for k in show)]
    head += (["epsilon"] if has_eps else []) + (["per client (mean over runs)"] if few else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 4 + ["---:"] * (len(head) - 4)) + "|"]
    for r, per_client in zip(rows, clients):
        cells = [r.group, str(len(r.runs)), r.seeds, r.metric]
        cells += [r.stats[k].text(2 if k in ("up_mb", "down_mb", "round_seconds") else 3) for k in show]
        if has_eps:
            cells.append("-" if r.epsilon is None else f"{r.epsilon:.3g}")
        if few:
            cells.append(", ".join(f"c{c} {v:.2f}" for c, v in per_client.items()))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def csv_text(tables: list[list[Row]]) -> str:
    """Every row of every table, each figure as ``<name>_mean``, ``<name>_sd``, ``<name>_n``."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        ["table", "group", "runs", "seeds", "metric"]
        + [f"{k}_{s}" for k in COLUMNS for s in ("mean", "sd", "n")]
        + ["epsilon", "run_dirs"]
    )
    for t, rows in enumerate(tables, start=1):
        for r in rows:
            cells: list[Any] = [t, r.group, len(r.runs), r.seeds, r.metric]
            for k in COLUMNS:
                s = r.stats[k]
                cells += ["" if s.mean is None else repr(s.mean), "" if s.sd is None else repr(s.sd), len(s.values)]
            cells += ["" if r.epsilon is None else repr(r.epsilon), ";".join(str(run.path) for run in r.runs)]
            writer.writerow(cells)
    return out.getvalue()
