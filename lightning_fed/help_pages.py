"""``lightning-fed <subcommand> --help`` answered from a stored page, without importing torch.

The parsers of ``fit``, ``validate`` and ``test`` are LightningCLI's: building one imports torch,
Lightning, transformers and PEFT (seconds), and so do the modules behind ``evaluate``, ``plan``
and ``report``. Their ``--help`` pages are therefore generated from the live parsers and stored
in ``lightning_fed/help_pages.json`` (data, generated); ``lightning-fed <subcommand> --help`` prints the stored page
when it is known to be the same as the live one:

- the versions of the libraries that shape the page are those the page was generated with:
  Python (argparse's layout), Lightning (the ``--trainer.*`` options, their docstrings and known
  subclasses), torch (what Lightning offers depends on it), jsonargparse and the two libraries
  it reads docstrings and stubs with (docstring-parser, typeshed-client). No other library's
  class is named on a page (``tests/test_cli_help.py`` checks it: ``fit`` has no ``--optimizer``,
  whose list of every imported Optimizer subclass named accelerate's and bitsandbytes'), so a
  newer transformers or PEFT than the pinned one (what ``pip install`` resolves a week after a
  release) keeps the fast pages,
- no plugin adds strategies or objectives (entry points ``lightning_fed.strategies`` /
  ``lightning_fed.modules``: their classes would join the page),
- the terminal is at least as wide as the page (80 columns), and
- the command is exactly ``<subcommand> --help`` (a ``--config`` before ``--help`` changes the
  defaults shown).

Otherwise, or with ``LIGHTNING_FED_LIVE_HELP=1``, the live parser answers as before.
``tests/test_cli_help.py`` compares every stored page with the live parser's, so the two cannot
drift: when they differ it writes the live pages into :data:`PAGES_FILE` and fails, saying to
commit the file (the same as ``python -m lightning_fed.help_pages --write``).

The option names of the stored pages also serve :mod:`lightning_fed.config_precheck`, which
refuses an unknown key before torch is imported (:func:`stored_page`).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path
from typing import Any

from lightning_fed.strict_parser import StrictParser

SUBCOMMANDS = ("fit", "validate", "test", "evaluate", "plan", "report")
"""Subcommands whose ``--help`` builds a parser that imports torch or Lightning."""
HELP_FLAGS = ("-h", "--help")
LIVE_ENV = "LIGHTNING_FED_LIVE_HELP"
COLUMNS = 80
"""The width the pages are generated at (argparse's default when the output is not a terminal)."""
LIBRARIES = ("lightning", "torch", "jsonargparse", "docstring-parser", "typeshed-client")
"""Distributions whose version changes a page (their options, docstrings, known subclasses, layout),
as pinned in ``requirements.txt``; compared without a local label (``2.13.0+cpu`` is ``2.13.0``).
Not transformers or PEFT: no page shows anything of theirs (module docstring)."""
PLUGIN_GROUPS = ("lightning_fed.strategies", "lightning_fed.modules")
PAGES_FILE = Path(__file__).resolve().parent / "help_pages.json"


def versions() -> dict[str, str]:
    """The versions of Python and of :data:`LIBRARIES` installed now (``"absent"`` if not installed)."""

    def _version(name: str) -> str:
        try:
            return version(name).split("+")[0]
        except PackageNotFoundError:
            return "absent"

    return {"python": ".".join(platform.python_version_tuple()[:2]), **{name: _version(name) for name in LIBRARIES}}


def stored_help(argv: list[str]) -> str | None:
    """The stored page for ``argv`` (``[subcommand, "--help"]``), or ``None`` if the live parser must answer."""
    if len(argv) != 2 or argv[0] not in SUBCOMMANDS or argv[1] not in HELP_FLAGS:
        return None
    if os.environ.get(LIVE_ENV, "").lower() in ("1", "true", "yes", "on"):
        return None
    if shutil.get_terminal_size((COLUMNS, 24)).columns < COLUMNS:
        return None
    return stored_page(argv[0])


def stored_page(subcommand: str) -> str | None:
    """The stored page of ``subcommand`` if it is the live parser's with the libraries installed now, else ``None``."""
    pages = stored()
    if pages["versions"] != versions() or any(entry_points(group=group) for group in PLUGIN_GROUPS):
        return None
    return pages["pages"].get(subcommand)


def stored() -> dict[str, Any]:
    """The stored pages: ``{"versions": {...}, "pages": {subcommand: text}}`` (:data:`PAGES_FILE`)."""
    return json.loads(PAGES_FILE.read_text(encoding="utf-8"))


_PRINT_PAGES = """
import contextlib, io, json, sys
from lightning_fed.cli import console_main
pages = {}
for name in sys.argv[1:]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = console_main([name, "--help"])
    if code != 0:
        raise SystemExit(f"`lightning-fed {name} --help` exited {code}")
    pages[name] = out.getvalue()
print(json.dumps(pages))
"""


def live_pages(subcommands: tuple[str, ...] = SUBCOMMANDS) -> dict[str, str]:
    """``lightning-fed <subcommand> --help`` of each subcommand as the live parsers print it, at :data:`COLUMNS`.

    One fresh process for all of them, from an empty folder, with the package this module
    belongs to first on the path. A page lists as known subclasses the classes imported by the
    time it is printed: the LightningCLI builds the parsers of ``fit``, ``validate`` and ``test``
    together, and the pages of ``evaluate``, ``plan`` and ``report`` list no subclasses, so one
    process prints what a process per command would.
    """
    package_root = str(Path(__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIGHTNING_FED_", "JSONARGPARSE_"))}
    env.update(
        {
            LIVE_ENV: "1",
            "COLUMNS": str(COLUMNS),
            "PYTHONPATH": os.pathsep.join([package_root, *filter(None, [os.environ.get("PYTHONPATH")])]),
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
        }
    )
    with tempfile.TemporaryDirectory() as empty:
        proc = subprocess.run(
            [sys.executable, "-c", _PRINT_PAGES, *subcommands],
            cwd=empty,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"printing the live --help pages failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def render(pages: dict[str, str], found_versions: dict[str, str]) -> str:
    """The text of :data:`PAGES_FILE`: the versions the pages were generated with, and the pages."""
    stored = {
        "generated_by": "python -m lightning_fed.help_pages --write (do not edit)",
        "versions": found_versions,
        "pages": pages,
    }
    return json.dumps(stored, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = StrictParser(
        prog="python -m lightning_fed.help_pages", description="Generate or check the stored --help pages."
    )
    parser.add_argument("--write", action="store_true", help=f"write {PAGES_FILE.name} from the live parsers")
    args = parser.parse_args(argv)
    pages = live_pages()
    source = render(pages, versions())
    if args.write:
        PAGES_FILE.write_text(source, encoding="utf-8")
        print(f"wrote {PAGES_FILE}")
        return 0
    current = PAGES_FILE.read_text(encoding="utf-8") if PAGES_FILE.is_file() else ""
    if current != source:
        print(f"{PAGES_FILE} is out of date: python -m lightning_fed.help_pages --write", file=sys.stderr)
        return 1
    print(f"{PAGES_FILE} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
