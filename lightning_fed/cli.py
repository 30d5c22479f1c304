"""``lightning-fed``: the process entry point.

``lightning-fed fit --config demo`` builds the model, the data and the federated
loop through :class:`~lightning_fed.federated_cli.FederatedCLI` (a LightningCLI), then fits.

This module is what starts first, so it imports nothing heavy: ``lightning-fed --help`` and
``lightning-fed <subcommand> --help`` (a page stored when the package is built,
:mod:`lightning_fed.help_pages`) answer before torch, Lightning, transformers, PEFT or
bitsandbytes are imported, and so do the argument errors of ``flower`` and ``configs``. The
LightningCLI lives in :mod:`lightning_fed.federated_cli`, imported when a Lightning subcommand
(``fit``, ``validate``, ``test``) runs.

Two entry points: :func:`console_main` is the process (``lightning-fed``, ``python -m
lightning_fed.cli``): exit status per :mod:`lightning_fed.errors`, one-line errors, signals,
and what is printed (:mod:`lightning_fed.console`). :func:`main` runs the same CLI in-process
and returns it (or raises), for tests and code that wants the trained objects.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from lightning_fed import console, startup, top_level
from lightning_fed.config_precheck import LIGHTNING_SUBCOMMANDS, REMOVED, named_source, precheck_arguments
from lightning_fed.errors import (
    DEBUG_ENV,
    EXIT_OK,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    EXIT_USER_ERROR,
    ArgumentsError,
    Terminated,
    UserError,
    after_error,
    exit_code,
    one_line,
    take_debug,
)
from lightning_fed.startup import stop_line

if TYPE_CHECKING:
    from lightning_fed.callbacks.signals import ProcessSignals
    from lightning_fed.federated_cli import FederatedCLI

PROG = console.PROG
ELSEWHERE = {
    "evaluate": "lightning_fed.evaluation.cli",
    "plan": "lightning_fed.plan_cli",
    "flower": "lightning_fed.deploy.flower_command",
    "report": "lightning_fed.report.cli",
    "configs": "lightning_fed.shipped_configs",
}
"""Subcommands with their own parser: ``lightning-fed <name> ...`` calls ``<module>.main(argv) -> int``."""
SUBCOMMANDS = (*LIGHTNING_SUBCOMMANDS, *ELSEWHERE)
"""Every subcommand (and ``predict``, :data:`~lightning_fed.config_precheck.REMOVED`: refused with what replaces it)."""

INTRO = f"""usage: {PROG} [--debug] [--verbose]
       {{fit,validate,test,evaluate,plan,flower,report,configs}} ...

{PROG}: federated fine-tuning and alignment of language models (SFT, DPO, FedBis/FedBiscuit,
FedPDPO, FedBiOT, FedHDS) on PyTorch Lightning, simulated in one process or run over Flower.

subcommands:
  fit        train a federation: {PROG} fit --config demo
  validate   evaluate a model on the clients' validation data
  test       evaluate a model on the clients' test data
  evaluate   score a finished run (preference accuracy, ROUGE-L, win rate...)
  plan       plan a run before starting it
  flower     Flower deployment helpers: {PROG} flower clientapp (a ClientApp process per SuperNode)
  report     compare finished runs: tables (Markdown, CSV), figures, one HTML page
  configs    list the shipped configs; --config takes a shipped name too (--config feddpo)
  Each lists its options with --help, e.g. {PROG} fit --help.

options:
  -h, --help  show this message
  --debug     show the full traceback of an error (also: {DEBUG_ENV}=1)
  --verbose   also show other libraries' notices and warnings (also: {console.VERBOSE_ENV}=1);
              by default a run prints the package's own lines and the progress bar

exit status: 0 success, 1 failure during training, 2 bad arguments, config, data or
checkpoint, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM); after 130/143 resume with
--ckpt_path <run>/checkpoints/last.ckpt.
"""


SHORT_USAGE = f"""usage: {PROG} [--debug] [--verbose] {{fit,validate,test,evaluate,plan,flower,report,configs}} ...
start with:  {PROG} configs                  (the shipped configs)
             {PROG} fit --config demo        (FedDPO, 4 clients, offline, ~2 min)
help:        {PROG} --help (the subcommands), {PROG} fit --help (every option)
"""
"""What ``lightning-fed`` alone prints (on stderr, exit 2): what to run first and where help is."""


def main(args: list[str] | None = None, run: bool = True, signals: ProcessSignals | None = None) -> FederatedCLI:
    """Run the CLI in-process and return it; errors are raised (see :func:`console_main` for the process)."""
    from lightning_fed.federated_cli import run_cli

    return run_cli(args, run=run, signals=signals)


def __getattr__(name: str) -> Any:
    # `from lightning_fed.cli import FederatedCLI` (and the other LightningCLI pieces) still work;
    # they are imported on first use, not when the process starts.
    if name.startswith("__"):
        raise AttributeError(name)
    module = importlib.import_module("lightning_fed.federated_cli")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def _subcommand_module(name: str) -> Any:
    """The module behind ``lightning-fed <name>`` (:data:`ELSEWHERE`), imported late."""
    module_name = ELSEWHERE[name]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name is None or not module_name.startswith(err.name):
            raise
        raise UserError(
            f"`{PROG} {name}` is not available in this installation (no module {module_name});"
            " subcommands: fit, validate, test"
        ) from None


def _dispatch(name: str, argv: list[str], module: Any) -> int:
    """``lightning-fed evaluate|plan ...``: the subcommand's own ``main(argv) -> int``."""
    if name == "plan":  # `--config feddpo`: a shipped config by name
        from lightning_fed.shipped_configs import resolve_config_args

        argv = resolve_config_args(argv)
    code = module.main(argv)
    return EXIT_OK if code is None else int(code)


@contextlib.contextmanager
def _sigterm_raises(ending: bool) -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` in the main thread (exit 143) for a subcommand with its own parser.

    The Lightning subcommands use :func:`~lightning_fed.callbacks.signals.handle_termination`
    instead, which leaves SIGTERM to Lightning during a fit; these subcommands run no fit of
    ours, and importing that module would import Lightning before their arguments are read.
    On exit the previous handler is restored, or with ``ending`` SIGTERM is ignored (:func:`startup.ended`).
    """
    if threading.current_thread() is not threading.main_thread():  # signal.signal would raise
        yield
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        if ending:
            startup.ended()
        else:
            signal.signal(signal.SIGTERM, previous)


def _report(err: BaseException, code: int, debug: bool, last_checkpoint: Any) -> None:
    if code in (EXIT_SIGINT, EXIT_SIGTERM):
        name = "SIGTERM" if code == EXIT_SIGTERM else "SIGINT (Ctrl-C)"
        if last_checkpoint is None:
            sys.stderr.write(stop_line(signal.SIGTERM if code == EXIT_SIGTERM else signal.SIGINT) + "\n")
            return
        where = f"the last complete round is in {last_checkpoint}; resume with --ckpt_path {last_checkpoint}"
        sys.stderr.write(f"{PROG}: stopped by {name}; {where}\n")
        return
    if debug:
        traceback.print_exception(err)
    sys.stderr.write(f"error: {one_line(err)}\n")
    if (line := after_error(err, debug)) is not None:
        sys.stderr.write(f"{line}\n")


def _outcome(err: BaseException, debug: bool, signals: ProcessSignals | None) -> int:
    """The exit status for ``err``, reporting it on stderr unless the parser already did."""
    started = signals.training_started if signals is not None else False
    stopped_by = signals.stopped_by if signals is not None else None
    code = exit_code(err, started)
    if stopped_by == "SIGINT":
        code = EXIT_SIGINT  # Lightning turns Ctrl-C into sys.exit(1)
    elif stopped_by == "SIGTERM":
        code = EXIT_SIGTERM
    if isinstance(err, SystemExit) and code in (EXIT_OK, EXIT_USER_ERROR, 1) and stopped_by is None:
        return code  # --help, --print_config, or a parse error the parser already printed
    _report(err, code, debug, signals.last_checkpoint if signals is not None else None)
    return code


def console_main(argv: list[str] | None = None) -> int:
    """The ``lightning-fed`` process: run a subcommand, return the exit status (see :mod:`lightning_fed.errors`).

    Called without ``argv`` (the process), SIGTERM and SIGINT stop it at once with exit 143 / 130
    until the command runs (:mod:`lightning_fed.startup`); with ``argv`` (in-process use) the
    caller's signal handlers stay as they are.
    """
    from_sys = argv is None
    if from_sys:
        startup.guard()  # already done by the console script; `python -m lightning_fed.cli` starts here
    argv = list(sys.argv[1:] if from_sys else argv)
    debug, argv = take_debug(argv)  # `--debug`, `--debug=false`, `--debug true`, anywhere
    verbose, argv = top_level.take_verbose(argv)  # `--verbose` likewise
    console.configure(verbose=verbose if verbose is not None else console.verbose_requested([]))
    if from_sys:  # LightningCLI warns when given args while sys.argv holds arguments too
        sys.argv[1:] = argv
    try:  # `--debug=maybe`, `fitt`, `--verbos`: before anything heavy is imported
        top_level.refuse(
            top_level.flag_problem(argv)
            or top_level.environment_problem()
            or top_level.subcommand_problem(argv, SUBCOMMANDS, tuple(REMOVED))
        )
    except ArgumentsError as err:
        return _outcome(err, debug, None)
    if not argv or argv[0] in ("-h", "--help"):
        (sys.stdout if argv else sys.stderr).write(INTRO if argv else SHORT_USAGE)
        return EXIT_OK if argv else EXIT_USER_ERROR
    from lightning_fed.help_pages import stored_help

    if (page := stored_help(argv)) is not None:  # `fit --help` without building the LightningCLI
        sys.stdout.write(page)
        return EXIT_OK
    if argv[0] in ELSEWHERE:
        if debug:  # `--debug` was taken out above; the subcommand reads it from the environment
            os.environ[DEBUG_ENV] = "1"
        try:
            module = _subcommand_module(argv[0])  # seconds; a signal meanwhile: startup's exit
            startup.release()
            with _sigterm_raises(ending=from_sys):  # then the error is reported, SIGTERM ignored
                return _dispatch(argv[0], argv[1:], module)
        except BaseException as err:  # noqa: BLE001 - every outcome becomes an exit status
            return _outcome(err, debug, None)
    if debug:  # jsonargparse raises with its traceback instead of exiting (the subcommands above: their own)
        os.environ["JSONARGPARSE_DEBUG"] = "true"
    try:
        precheck_arguments(argv)  # what can be checked before torch is imported (seconds of CPU)
        # a resumed checkpoint's own parts, with torch alone imported (lightning_fed/federation/early_check.py)
        from lightning_fed.federation.early_check import precheck_checkpoint, precheck_key_store, precheck_noise

        precheck_key_store(argv)  # a private run's key store that is no folder (a FIFO, a file): no torch
        precheck_checkpoint(argv)
        precheck_noise(argv)  # a count noise the calibrated noise multiplier leaves no room for (Opacus, torch)
        # Lightning, torch, transformers: seconds (minutes on a loaded machine); a signal
        # meanwhile ends the process at once (lightning_fed/startup.py), nothing is written yet.
        import lightning_fed.federated_cli  # noqa: F401
        from lightning_fed.callbacks.signals import ProcessSignals, handle_termination, stop_if_requested
    except BaseException as err:  # noqa: BLE001 - every outcome becomes an exit status
        _release_early()
        if from_sys:
            startup.ended()  # the error is reported, not turned into a stop by a SIGTERM meanwhile
        return _outcome(err, debug, None)

    signals = ProcessSignals()
    # replaces startup's SIGTERM handler: a fit saves what it can; the process then ends with its status
    with handle_termination(signals, ending=from_sys):
        startup.release()
        try:
            main(None if from_sys else argv, signals=signals)
            stop_if_requested()  # a SIGTERM some code dropped after the last safe point (callbacks/signals.py)
            return EXIT_OK
        except BaseException as err:  # noqa: BLE001 - every outcome becomes an exit status
            signals.finished = True  # decided: a SIGTERM while it is reported does not change it
            return _outcome(named_source(err, argv), debug, signals)  # a value's config file, as the precheck's
        finally:
            _release_early()


def _release_early() -> None:
    """The run folder held before torch (a resume's, :func:`~lightning_fed.federation.version_folder.hold_early`)
    and not adopted by a run: let go (the process may be an in-process caller's)."""
    from lightning_fed.federation.version_folder import release_early

    release_early()


if __name__ == "__main__":
    sys.exit(console_main())
