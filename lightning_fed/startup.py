"""The first thing a ``lightning-fed`` process does: SIGTERM and SIGINT stop it at once, with its one line.

Starting takes seconds (torch, Lightning and transformers import), 683 s once on a machine at
load 40. Python's own defaults during that time are wrong for a script: SIGTERM ends the
process with no message (status -15), and Ctrl-C prints a traceback from inside some library's
import. Nothing has been written yet, so there is nothing to save: :func:`guard`, installed
before anything else is imported, prints the line every stop prints (:mod:`lightning_fed.cli`)
and exits 143 (SIGTERM) or 130 (SIGINT) straight from the handler, after letting go of a run folder
the precheck already holds (:func:`_let_go`), in the middle of an import if
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
WROTE_NOTHING = "nothing was written"
"""What a stop says of a command that writes nothing (``plan``, ``--print_config``), or of one stopped
while it starts (:func:`guard`), before it could write."""
NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT (Ctrl-C)"}
EVALUATING = ("validate", "test")
"""The subcommands that write ``<stage>_results.json`` once their evaluation is done."""


def stop_line(signum: int, argv: list[str] | None = None, started: bool = True) -> str:
    """What a process stopped before its command wrote anything says on stderr (also
    :func:`lightning_fed.cli._report`): what the stop left unwritten, in the words of its subcommand
    (its command line, ``argv`` or ``sys.argv``; red team 15 L8: ``plan`` and ``validate`` said fit's).

    A ``fit`` says no round completed, and one resumed from a checkpoint (``--ckpt_path``) names that
    checkpoint: it is still the one to resume from. ``validate``/``test`` say their results file was not
    written (``started``: the command ran; a logger's events file may be); a command stopped while it
    starts (``started`` false), ``plan`` and ``--print_config`` wrote nothing; any other command did not
    finish."""
    args = (sys.argv if argv is None else argv)[1:]
    subcommand = next((a for a in args if not a.startswith("-")), None)
    printing = any(a.startswith("--print_config") for a in args)
    if subcommand == "fit" and not printing:
        resumed = resumed_checkpoint(args)
        what = NOTHING_WRITTEN if resumed is None else f"{NO_ROUND}; resume with --ckpt_path {resumed}"
    elif not started or printing or subcommand in (None, "plan"):
        what = WROTE_NOTHING
    elif subcommand in EVALUATING:
        what = f"{subcommand} did not finish, so no {subcommand}_results.json was written"
    else:
        what = f"{subcommand} did not finish"
    return f"{PROG}: stopped by {NAMES[signum]}; {what}"


def resumed_checkpoint(args: list[str]) -> str | None:
    """The ``--ckpt_path`` of a ``fit`` command line (``args``: after the program, the last one given), else None."""
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
    try:
        try:
            _let_go()
        except Exception:  # noqa: BLE001, S110 - a folder that cannot be tidied must not cost the line or the status
            pass
        os.write(2, (stop_line(signum, started=False) + "\n").encode())
    finally:
        os._exit(128 + signum)  # 143 / 130 (lightning_fed.errors)


def _let_go() -> None:
    """Let go of the run folders the precheck held before torch (a resume's, a ``validate``'s:
    :func:`~lightning_fed.federation.version_folder.hold_early`) as a refusal does, removing a ``.lock``
    this process made in a folder that had none: the folder is left as it was (red team 15 L6: a resume
    of a copy without its ``.lock``, stopped while it imported, left one). Only if that module is loaded:
    nothing is imported here."""
    if (folders := sys.modules.get("lightning_fed.federation.version_folder")) is not None:
        folders.release_early()


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
