"""What ``lightning-fed`` itself takes, before a subcommand's own parser: ``--debug``, ``--verbose``,
``--help`` and the subcommand's name, checked before anything heavy is imported (issue 41).

On 894fdde ``lightning-fed fitt ...`` and ``lightning-fed --verbose=maybe fit ...`` were refused by
the LightningCLI's parser after torch, Lightning and transformers were imported (7-9 s of CPU),
naming only ``fit``, ``validate`` and ``test``, and ``fit ... --debug=maybe`` was called an unknown
option of ``fit`` though ``--debug`` may come after the subcommand (docs/guides/resume-signals.md).
Here a mistyped subcommand is named with the closest of all of them, and ``--debug`` /
``--verbose`` take an optional boolean before or after the subcommand (``--verbose``,
``--verbose=true``, ``--verbose false``); any other value is refused naming the flag.

Imports only :mod:`lightning_fed.errors`, :mod:`lightning_fed.console` and the standard library.
"""

from __future__ import annotations

import difflib
import os

from lightning_fed.console import VERBOSE_ENV, VERBOSE_FLAG
from lightning_fed.errors import _BOOLEAN, DEBUG_ENV, DEBUG_FLAG, ArgumentsError, take_flag

PROG = "lightning-fed"
TOP_OPTIONS = ("-h", "--help", DEBUG_FLAG, VERBOSE_FLAG)
"""The options written before a subcommand."""


def flag_problem(argv: list[str]) -> str | None:
    """``--debug=<value>`` or ``--verbose=<value>`` (anywhere) whose value is no boolean."""
    for arg in argv:
        for flag in (DEBUG_FLAG, VERBOSE_FLAG):
            if arg.startswith(flag + "=") and arg.split("=", 1)[1].lower() not in _BOOLEAN:
                return f"{flag} takes true or false (or nothing), got {arg.split('=', 1)[1]!r}"
    return None


def environment_problem() -> str | None:
    """``LIGHTNING_FED_DEBUG`` / ``LIGHTNING_FED_VERBOSE`` set to no boolean: refused naming the variable,
    as ``--debug=maybe`` names the flag (red team 12 row 16: ``LIGHTNING_FED_DEBUG=maybe`` was silently
    read as false). Unset or empty: not given."""
    for name in (DEBUG_ENV, VERBOSE_ENV):
        value = os.environ.get(name, "").strip()
        if value and value.lower() not in _BOOLEAN:
            return f"{name} takes true or false (1/0, yes/no, on/off), got {value!r}"
    return None


def take_verbose(argv: list[str]) -> tuple[bool | None, list[str]]:
    """Whether ``--verbose`` (``--verbose``, ``--verbose=<bool>``, ``--verbose <bool>``, anywhere)
    was given (``None``: not given), and ``argv`` without it (as :func:`lightning_fed.errors.take_debug`)."""
    return take_flag(argv, VERBOSE_FLAG)


def subcommand_problem(argv: list[str], subcommands: tuple[str, ...], removed: tuple[str, ...] = ()) -> str | None:
    """The line refusing ``argv``'s first word (``--debug`` / ``--verbose`` already taken out): an
    option ``lightning-fed`` does not take, or no subcommand (with the closest of ``subcommands``;
    ``removed`` ones are left to say what replaces them)."""
    if not argv or argv[0] in TOP_OPTIONS or argv[0] in subcommands or argv[0] in removed:
        return None
    first = argv[0]
    if first.startswith("-"):
        name = first.split("=", 1)[0]
        near = difflib.get_close_matches(name, TOP_OPTIONS[1:], n=1, cutoff=0.6)
        later = next((i for i, arg in enumerate(argv) if arg in subcommands), None)  # given after the options
        words = [argv[later], *argv[:later], *argv[later + 1 :]] if later is not None else ["fit", *argv[:3]]
        hint = f"did you mean {near[0]}?" if near else f"a subcommand comes first: {PROG} {' '.join(words)}"
        return f"unknown option {name} before the subcommand; {hint}"
    near = difflib.get_close_matches(first, subcommands, n=1, cutoff=0.5)
    hint = f"did you mean {near[0]}?" if near else f"the subcommands: {', '.join(subcommands)}"
    return f"unknown subcommand {first!r}; {hint}"


def refuse(problem: str | None) -> None:
    """Raise :class:`~lightning_fed.errors.ArgumentsError` for ``problem`` (the ``error:`` line and
    ``tip: lightning-fed --help lists every option``, exit 2), if there is one."""
    if problem is not None:
        raise ArgumentsError(problem, PROG)
