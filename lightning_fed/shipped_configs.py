"""The configs shipped inside the package, by name: ``--config feddpo`` and ``lightning-fed configs``.

The YAML files live in ``lightning_fed/configs/`` (package data, so an installed wheel has them;
the repository's ``configs/`` is a link to that folder). ``configs/catalog.csv`` gives each one
its method, paper and a one-line description (litgpt's ``config_hub`` plays the same part).

A ``--config`` value that is not an existing path, has no ``.yaml``/``.yml`` suffix and is the
name of a shipped config is replaced by that file's path; a path that does not exist but ends
in a shipped config's file name (``configs/demo.yaml`` outside a clone) is a one-line error
suggesting the name; anything else is left as given, for the parser to read or to report.

``lightning-fed configs --copy NAME`` writes a shipped config into the current folder (with
the example data it reads, from ``lightning_fed/examples/``), or the Flower app folder
(``--copy flower_app``): the starting points of the own-data and Flower guides, from a wheel.
"""

from __future__ import annotations

import csv
import difflib
import sys
from pathlib import Path

from lightning_fed.errors import OneLineParser, UserError, unwritable

PACKAGE_DIR = Path(__file__).resolve().parent
CONFIG_DIR = PACKAGE_DIR / "configs"
EXAMPLES_DIR = PACKAGE_DIR / "examples"  # the repository's examples/ links here
FLOWER_APP = "flower_app"
FLOWER_APP_DIR = PACKAGE_DIR / "deploy" / FLOWER_APP
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
        UserError: ``value`` is empty; a missing file named like a shipped config
            (``configs/demo.yaml`` from an installed package), with the name to use instead; or
            neither an existing file, nor a path, nor a shipped name (it used to reach the parser
            as "Unexpected config:" or "File does not exist").
    """
    if not value.strip():
        raise UserError(f"--config {value!r} is empty: give a config file or a shipped name (`{LIST}` lists them)")
    path = Path(value)
    if path.exists():
        return value
    if path.suffix in (".yaml", ".yml") or "/" in value or "\\" in value:
        if path.suffix in (".yaml", ".yml") and path.stem in shipped_configs():
            raise UserError(
                f"--config: no file {value!r} (in {Path.cwd()}); did you mean `--config {path.stem}` "
                f"(the shipped config {path.stem!r})?"
            )
        return value
    path = shipped_configs().get(value)
    if path is None:
        close = difflib.get_close_matches(value, list(shipped_configs()), n=1)
        hint = f"did you mean `--config {close[0]}`?" if close else f"`{LIST}` lists them"
        raise UserError(f"--config {value!r}: no such file, and no shipped config of that name ({hint})")
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


def copy_files(name: str) -> dict[str, Path]:
    """``{relative destination: source}`` of what ``configs --copy name`` writes.

    A shipped config is ``<name>.yaml`` plus every example folder its text names
    (``examples/own_data/`` for ``own_data``, at the same relative path, so the config runs
    as it is from the folder it was copied into); ``flower_app`` is the Flower app folder.

    Raises:
        UserError: ``name`` is neither a shipped config nor ``flower_app``.
    """
    if name == FLOWER_APP:
        return {f"{FLOWER_APP}/{p.name}": p for p in sorted(FLOWER_APP_DIR.iterdir()) if p.is_file()}
    configs = shipped_configs()
    if name not in configs:
        raise UserError(
            f"lightning-fed configs: --copy {name!r} is neither a shipped config "
            f"(lightning-fed configs lists them) nor {FLOWER_APP!r}"
        )
    out = {f"{name}.yaml": configs[name]}
    text = configs[name].read_text(encoding="utf-8")
    for folder in sorted(p for p in EXAMPLES_DIR.iterdir() if p.is_dir()) if EXAMPLES_DIR.is_dir() else []:
        if f"examples/{folder.name}/" in text:
            out.update({f"examples/{folder.name}/{f.name}": f for f in sorted(folder.iterdir()) if f.is_file()})
    return out


def copy_shipped(name: str, dest: Path) -> list[str]:
    """Write what ``configs --copy name`` writes into ``dest``; the relative paths written.

    Raises:
        UserError: unknown ``name``, or a file that would be overwritten (nothing is written then).
    """
    files = copy_files(name)
    for rel in files:  # every file and folder checked before the first is written
        target = dest / rel
        blocked = next(
            (f for f in reversed(target.parents) if f.is_relative_to(dest) and f.exists() and not f.is_dir()), None
        )
        if blocked is not None:
            raise UserError(
                f"lightning-fed configs: --copy {name}: {blocked} is a file, not a folder (it would hold {rel});"
                " nothing written"
            )
        if target.exists() or target.is_symlink():
            raise UserError(f"lightning-fed configs: --copy {name}: {target} exists; not overwriting it")
    if why := unwritable(dest):
        raise UserError(f"lightning-fed configs: --copy {name}: cannot write into {str(dest)!r}: {why}")
    for rel, source in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(source.read_bytes())
    return list(files)


def main(argv: list[str]) -> int:
    """``lightning-fed configs``: list the shipped configs (``--path``: also where each file is).

    Raises:
        UserError: bad arguments (exit status 2).
    """
    parser = OneLineParser(
        prog="lightning-fed configs",
        description="List the configs shipped with the package; run one with lightning-fed fit --config NAME.",
    )
    parser.add_argument("--path", action="store_true", help="print each config's file path too")
    parser.add_argument(
        "--copy",
        metavar="NAME",
        action="append",  # each one seen: argparse's last-wins dropped all but the last (red team 15 L4)
        help="write the shipped config NAME (as NAME.yaml, with the example data it reads) or the Flower app "
        f"folder ({FLOWER_APP}) into the current folder, to edit and run; one NAME per call",
    )
    args = parser.parse_args(argv)
    if args.copy is not None and len(args.copy) > 1:
        names = ", ".join(repr(n) for n in args.copy)
        raise UserError(
            f"lightning-fed configs: --copy given {len(args.copy)} names ({names}); it copies one per call:"
            " run it once for each; nothing written"
        )
    if args.copy is not None:
        written = copy_shipped(args.copy[0], Path.cwd())
        sys.stdout.write("wrote " + ", ".join(written) + "\n")
        return 0
    rows = table()
    header = ("name", "method", "paper", "description")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(header[:3], widths)) + "  " + header[3]]
    for row in rows:
        line = "  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3]
        lines.append(line + (f"\n    {shipped_configs()[row[0]]}" if args.path else ""))
    sys.stdout.write("\n".join(lines) + "\n\nrun one by name: lightning-fed fit --config demo\n")
    return 0
