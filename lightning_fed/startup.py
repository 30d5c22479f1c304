"""The first thing a ``lightning-fed`` process does: SIGTERM and SIGINT stop it at once, with its one line.

Starting takes seconds (torch, Lightning and transformers import), 683 s once on a machine at
load 40. Python's own defaults during that time are wrong for a script: SIGTERM ends the
process with no message (status -15), and Ctrl-C prints a traceback from inside some library's
import. Nothing has been written yet, so there is nothing to save: :func:`guard`, installed
before anything else is imported, prints the line every stop prints (:mod:`lightning_fed.cli`)
and exits 143 (SIGTERM) or 130 (SIGINT) straight from the handler, in the middle of an import if
need be (an exception raised there could be swallowed by a library's ``except`` or leave
modules half imported; the process ends instead).

When the command itself runs (a fit, an evaluation...), :func:`release` gives Ctrl-C back to
Python (``KeyboardInterrupt``, which Lightning and the subcommands handle) and the command
installs its own SIGTERM handler over this one, which saves what can be resumed. Once the command
has reported its outcome, :func:`ended` ignores SIGTERM: the process is ending with that status.

Only ``os``, ``signal``, ``sys`` and ``threading`` are imported here (the first three are loaded by the interpreter
before any module of the package).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

PROG = "lightning-fed"
NO_ROUND = "no round completed in this run"
NOTHING_WRITTEN = f"{NO_ROUND}, so no checkpoint was written by it"
NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT (Ctrl-C)"}


def stop_line(signum: int, argv: list[str] | None = None) -> str:
    """What a process stopped before its first round says on stderr (also :func:`lightning_fed.cli._report`).

    A ``fit`` resumed from a checkpoint (``--ckpt_path`` on its command line, ``argv`` or
    ``sys.argv``) names that checkpoint: it is still the one to resume from."""
    if (resumed := resumed_checkpoint(sys.argv if argv is None else argv)) is not None:
        return f"{PROG}: stopped by {NAMES[signum]}; {NO_ROUND}; resume with --ckpt_path {resumed}"
    return f"{PROG}: stopped by {NAMES[signum]}; {NOTHING_WRITTEN}"


def resumed_checkpoint(argv: list[str]) -> str | None:
    """The ``--ckpt_path`` of a ``fit`` command line (the last one given), else None."""
    args = argv[1:]
    if next((a for a in args if not a.startswith("-")), None) != "fit":
        return None
    found = None
    for i, arg in enumerate(args):
        if arg == "--ckpt_path" and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith("--ckpt_path="):
            found = arg.split("=", 1)[1]
    return found or None


def _stop_now(signum: int, frame: object) -> None:
    os.write(2, (stop_line(signum) + "\n").encode())
    os._exit(128 + signum)  # 143 / 130 (lightning_fed.errors)


def guard() -> None:
    """SIGTERM and SIGINT print :func:`stop_line` and exit 143 / 130 immediately (start-up: nothing to save)."""
    if threading.current_thread() is not threading.main_thread():  # signal.signal would raise
        return
    for signum in NAMES:
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler, _stop_now):
            signal.signal(signum, _stop_now)  # a handler the embedding program set stays


def release() -> None:
    """The command runs now: Ctrl-C raises ``KeyboardInterrupt`` again (SIGTERM: the command's handler)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is _stop_now:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def ended() -> None:
    """The command reported its outcome and the process only ends now: SIGTERM is ignored from here on,
    so the exit status is the one reported (a completed run's 0 stays 0).

    Not a Python handler that returns: late in its shutdown Python resets such a handler to the
    default action, and a SIGTERM then ends the process by the signal (status -15, 143 in a
    shell, no line; issue 41). Ctrl-C is left as it is.
    """
    if threading.current_thread() is threading.main_thread():  # signal.signal would raise
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def guarding() -> bool:
    """Whether :func:`guard` is the SIGTERM handler now."""
    return signal.getsignal(signal.SIGTERM) is _stop_now
