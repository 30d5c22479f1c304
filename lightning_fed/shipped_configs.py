"""The configs shipped inside the package, by name: ``--config feddpo`` and ``lightning-fed configs``.

The YAML files live in ``lightning_fed/configs/`` (package data, so an installed wheel has them;
the repository's ``configs/`` is a link to that folder). ``configs/catalog.csv`` gives each one
its method, paper and a one-line description (litgpt's ``config_hub`` plays the same part).

A ``--config`` value that is not an existing path, has no ``.yaml``/``.yml`` suffix and is the
name of a shipped config is replaced by that file's path; anything else is left as given, for
the parser to read or to report.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import NoReturn

from lightning_fed.errors import UserError

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
CATALOG = CONFIG_DIR / "catalog.csv"
CATALOG_COLUMNS = ("name", "method", "paper", "description")
LIST = "lightning-fed configs"


def shipped_configs() -> dict[str, Path]:
    """``{name: path}`` of every shipped config, sorted by name."""
    return {p.stem: p for p in sorted(CONFIG_DIR.glob("*.yaml"))}


def catalog() -> dict[str, dict[str, str]]:
    """``{name: {"method", "paper", "description"}}`` from ``configs/catalog.csv``."""
    with open(CATALOG, newline="", encoding="utf-8") as f:
        return {row["name"]: {k: row[k] for k in CATALOG_COLUMNS[1:]} for row in csv.DictReader(f)}


def resolve_config(value: str) -> str:
    """The path of the shipped config ``value`` names, or ``value`` itself (a path).

    Raises:
        UserError: ``value`` is empty, or neither an existing file, nor a path, nor a shipped name
            (it used to reach the parser as "Unexpected config:" or "File does not exist").
    """
    if not value.strip():
        raise UserError(f"--config {value!r} is empty: give a config file or a shipped name (`{LIST}` lists them)")
    if Path(value).exists() or Path(value).suffix in (".yaml", ".yml") or "/" in value or "\\" in value:
        return value
    path = shipped_configs().get(value)
    if path is None:
        raise UserError(f"--config {value!r}: no such file, and no shipped config of that name (`{LIST}` lists them)")
    return str(path)


def resolve_config_args(args: list[str]) -> list[str]:
    """``args`` with each ``--config NAME`` / ``--config=NAME`` / ``-c NAME`` of a shipped name resolved."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg in ("--config", "-c") and i + 1 < len(out):
            out[i + 1] = resolve_config(out[i + 1])
        elif arg.startswith("--config="):
            out[i] = "--config=" + resolve_config(arg.split("=", 1)[1])
    return out


def table() -> list[tuple[str, str, str, str]]:
    """``(name, method, paper, description)`` of every shipped config; a config missing from the
    catalog shows its file's first comment line."""
    rows = catalog()
    out = []
    for name, path in shipped_configs().items():
        if name in rows:
            out.append((name, *(rows[name][k] for k in CATALOG_COLUMNS[1:])))
        else:
            first = path.read_text(encoding="utf-8").splitlines()[:1]
            out.append((name, "-", "-", first[0].lstrip("# ").strip() if first and first[0].startswith("#") else "-"))
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UserError(f"{self.prog}: {message}")  # one line, exit status 2 (lightning_fed/errors.py)


def main(argv: list[str]) -> int:
    """``lightning-fed configs``: list the shipped configs (``--path``: also where each file is).

    Raises:
        UserError: bad arguments (exit status 2).
    """
    parser = _Parser(
        prog="lightning-fed configs",
        description="List the configs shipped with the package; run one with lightning-fed fit --config NAME.",
    )
    parser.add_argument("--path", action="store_true", help="print each config's file path too")
    args = parser.parse_args(argv)
    rows = table()
    header = ("name", "method", "paper", "description")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header[:3], widths)) + "  " + header[3]]
    for row in rows:
        line = "  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3]
        lines.append(line + (f"\n    {shipped_configs()[row[0]]}" if args.path else ""))
    sys.stdout.write("\n".join(lines) + "\n\nrun one by name: lightning-fed fit --config demo\n")
    return 0
