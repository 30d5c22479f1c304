"""``lightning-fed report``: compare finished runs in tables, figures and one HTML page.

    lightning-fed report runs/real_text/*/s* --by method,partition --out report/

Writes into ``--out`` (default ``report``): ``report.md`` and ``report.csv`` (one table per set of
comparable runs, one row per group of runs: mean ± sd over seeds), ``table<k>_metric.png``,
``table<k>_clients.png``, ``table<k>_bytes.png`` and ``report.html`` (all of it in one file, the
figures inline). The Markdown is printed too. Everything is checked before anything is written.

A run that repeats another (the same config and seed, see :func:`~lightning_fed.report.runs.drop_repeats`)
is counted once, and a group holding two runs of one seed is pointed out: both on stderr as
``warning:`` lines and in the report under "Notes". So is a run that cannot be reported among
the runs a glob or a folder of runs matches (an interrupted run: no ``summary.json``, a damaged
file, no evaluated round): it is left out (:func:`~lightning_fed.report.runs.find_runs`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lightning_fed.errors import ArgumentsError, OneLineParser, UserError, unwritable
from lightning_fed.report.figures import FIGURES, save
from lightning_fed.report.html import page
from lightning_fed.report.runs import Run, drop_repeats, find_runs
from lightning_fed.report.table import (
    DEFAULT_METRICS,
    comparable_key,
    csv_text,
    difference,
    group_rows,
    markdown,
    repeated_seeds,
)

PROG = "lightning-fed report"
BUILT_IN_FIELDS = ("method", "partition", "strategy", "model", "seed")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("runs", nargs="+", metavar="RUN_OR_GLOB", help="run folders, folders of runs, or globs")
    parser.add_argument(
        "--by",
        default="method,partition",
        help=f"comma-separated fields that make a group: {', '.join(BUILT_IN_FIELDS)} or a dotted config key"
        " (e.g. federation.strategy.init_args.server_lr); the runs of a group are its seeds",
    )
    parser.add_argument(
        "--metric", default=None, help=f"the metric (default: the first of {', '.join(DEFAULT_METRICS)})"
    )
    parser.add_argument("--out", default="report", help="the folder to write into (created)")
    parser.add_argument("--title", default="lightning-fed report", help="the HTML page's title")
    return parser


def _check_by(runs: list[Run], by: list[str]) -> None:
    for name in by:
        if name in BUILT_IN_FIELDS:
            continue
        for run in runs:
            try:
                run.field(name)
            except KeyError:
                raise UserError(
                    f"--by {name!r}: not in the config of {run.path} (fields: {', '.join(BUILT_IN_FIELDS)}"
                    " or a dotted config key)"
                ) from None


def _metric(runs: list[Run], asked: str | None) -> str:
    have = [set(r.metrics()) for r in runs]
    common = set.intersection(*have)
    if asked is not None:
        if asked not in common:
            missing = next(r.path for r, h in zip(runs, have) if asked not in h)
            raise UserError(f"--metric {asked!r}: not in the final evaluation of {missing} (it has: {sorted(common)})")
        return asked
    for name in DEFAULT_METRICS:
        if name in common:
            return name
    if not common:
        if bare := next((r for r, h in zip(runs, have) if not h), None):  # a run with no final evaluation at all
            raise UserError(f"{bare.path / 'summary.json'}: {bare.no_metric_reason()}")
        raise UserError(f"{runs[0].path}: no final evaluation metric shared by every run (was the run evaluated?)")
    return sorted(common)[0]


def main(argv: list[str]) -> int:
    """Write the report of the runs named in ``argv``.

    Raises:
        UserError: bad arguments, no runs, unreadable run files (exit status 2), before anything is written.
    """
    args = build_parser().parse_args(argv)
    if empty := [run for run in args.runs if not run.strip()]:  # Path("") is the working folder: scanned
        raise ArgumentsError(f"RUN_OR_GLOB {empty[0]!r} is empty: name a run folder, a folder of runs or a glob", PROG)
    if not args.out.strip():
        raise ArgumentsError(f"--out {args.out!r} is empty: name the report's folder", PROG)
    by = [b.strip() for b in args.by.split(",") if b.strip()]
    if not by:
        raise UserError(f"--by {args.by!r}: name at least one field ({', '.join(BUILT_IN_FIELDS)})")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {args.out!r}: a file, not a folder")
    if why := unwritable(out):  # a file above it, a read-only or virtual file system (/proc)
        raise UserError(f"--out {args.out!r}: {why}")
    skipped: list[str] = []
    try:
        found = find_runs(args.runs, skipped)
    except UserError:  # every run left out: why each was, one warning line each, before the error
        for note in skipped:
            sys.stderr.write(f"warning: {note}\n")
        raise
    runs, repeats = drop_repeats(found)
    _check_by(runs, by)
    metric = _metric(runs, args.metric)

    sets: dict[tuple, list[Run]] = {}
    for run in runs:
        sets.setdefault(comparable_key(run), []).append(run)
    ordered = sorted(sets.values(), key=len, reverse=True)  # table 1: the largest set (stable: then first seen)
    tables = [group_rows(members, by, metric) for members in ordered]
    reference = ordered[0][0]
    notes = skipped + [note for run in runs for note in run.notes]
    notes += [
        f"{again.path} repeats {first.path} (same config and seed {first.seed}): counted once"
        for again, first in repeats
    ]
    notes += [line for rows in tables for line in repeated_seeds(rows)]

    try:  # checked above; a disk that fills up or a folder that changes meanwhile still names --out
        out.mkdir(parents=True, exist_ok=True)
        sections, md = [], [f"# {args.title}", ""]
        tables_from = len(md)
        if notes:
            md += ["## Notes", "", *(f"- {n}" for n in notes), ""]
            tables_from = len(md)  # stdout: the tables (the notes go to stderr as warnings)
        for k, (rows, members) in enumerate(zip(tables, ordered), start=1):
            why = "" if k == 1 else difference(members[0], reference)
            figures = [save(draw(rows), out / f"table{k}_{name}.png") for name, draw in FIGURES.items()]
            table = markdown(rows)
            heading = f"Table {k}: {len(members)} run{'s' if len(members) != 1 else ''}, {metric}"
            sections.append((heading, why, table, figures))
            md += [f"## {heading}", *([why, ""] if why else []), table, ""]
            md += [f"![{p.stem}]({p.name})" for p in figures] + [""]
        (out / "report.md").write_text("\n".join(md), encoding="utf-8")
        (out / "report.csv").write_text(csv_text(tables), encoding="utf-8")
        (out / "report.html").write_text(page(args.title, sections, notes), encoding="utf-8")
    except OSError as err:
        raise UserError(f"--out {args.out!r}: cannot write the report ({err.strerror or type(err).__name__})") from None
    for note in notes:
        sys.stderr.write(f"warning: {note}\n")
    sys.stdout.write(
        "\n".join(md[tables_from:]) + f"\nwritten: {out}/report.md, report.csv, report.html and the figures\n"
    )
    return 0
