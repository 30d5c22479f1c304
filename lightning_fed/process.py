"""The ``lightning-fed`` console script: :func:`lightning_fed.startup.guard` as its first statement
(SIGTERM and Ctrl-C stop a starting process at once), then :func:`lightning_fed.cli.console_main`.

Its own module, so that :mod:`lightning_fed.startup` (which the CLI imports) does not import the CLI.
"""

from __future__ import annotations

from lightning_fed import startup


def main() -> int:
    """The ``lightning-fed`` process: :func:`~lightning_fed.startup.guard`, then the CLI."""
    startup.guard()
    from lightning_fed.cli import console_main

    return console_main()
