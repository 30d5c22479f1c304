"""Argument parsers that take an option only by its full name, and name the closest one otherwise.

argparse takes any unambiguous prefix of an option by default (``--cop`` for ``--copy``,
``--batch`` for ``--batch-size``); the docs promise that an option is never abbreviated
(docs/guides/running.md), so every parser of the package is built with ``allow_abbrev=False``
(the LightningCLI's parser is too, :mod:`lightning_fed.federated_cli`). An unknown option is then
refused with ``unrecognized arguments: --cop tiny``; :func:`close_option` adds the option meant
(``; did you mean --copy?``), as :mod:`lightning_fed.config_precheck` does for ``fit``.
"""

from __future__ import annotations

import argparse
import difflib
from typing import Any, NoReturn

_UNRECOGNIZED = "unrecognized arguments:"


def closest_name(name: str, names: list[str]) -> str | None:
    """The option in ``names`` that ``name`` abbreviates or misspells, if one is close enough."""
    longest_prefix = sorted(n for n in names if n.startswith(name) and n != name)
    if longest_prefix:
        return longest_prefix[0]
    match = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return match[0] if match else None


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """The options of ``parser`` and of its subcommands (whose leftovers the top parser reports)."""
    names = set(parser._option_string_actions)  # noqa: SLF001 - argparse's table of options
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in action.choices.values():
                names |= _option_strings(sub)
    return names


def close_option(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's error ``message``, with the option closest to the first unrecognized one named."""
    if not message.startswith(_UNRECOGNIZED):
        return message
    given = [a.split("=", 1)[0] for a in message[len(_UNRECOGNIZED) :].split() if a.startswith("--")]
    names = sorted(s for s in _option_strings(parser) if s.startswith("--"))
    near = closest_name(given[0], names) if given else None
    return f"{message}; did you mean {near}?" if near else message


class StrictParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` without abbreviations, whose unknown-option error names the closest option."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        super().error(close_option(self, message))
