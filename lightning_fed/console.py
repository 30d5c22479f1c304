"""What a ``lightning-fed`` process prints: the package's own lines and the progress bar.

By default a run shows what a user can act on: the package's messages (``federation: ...``,
truncation and coreset warnings, resume notes, errors) and Lightning's progress bar. The
third-party notices of every run ("GPU available: False", "Seed set to 0", Lightning's
``log_every_n_steps`` hint and cloud-logging tip, transformers' deprecation warnings...) are
held back; ``--verbose`` (or ``LIGHTNING_FED_VERBOSE=1``) brings them all back. Errors of any
library always show.

Where it is done, and why there: logging records are filtered by the file that emitted them
(``record.pathname``; Lightning's ``rank_zero_info`` passes the caller's frame), warnings by the
file they are attributed to (``rank_zero_warn`` uses the caller's stack level too). So the
package keeps using Lightning's rank-zero helpers and no call site changes.

One message is dropped everywhere, verbose or not, as soon as the package is imported:
bitsandbytes (imported by PEFT) on a CPU with AVX512-BF16 tries to download a kernel from the
Hugging Face hub and logs "Failed to load CPU gemm_4bit_forward from kernels-community ...
pip install kernels" when that fails. Nothing a user can do helps (the kernel comes from the
hub, and the package runs offline); bitsandbytes falls back to its own CPU code.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

PROG = "lightning-fed"
VERBOSE_FLAG = "--verbose"
VERBOSE_ENV = "LIGHTNING_FED_VERBOSE"
PACKAGE_DIR = os.path.dirname(os.path.realpath(__file__))  # not pathlib: this module starts every process

BNB_CPU_LOGGER = "bitsandbytes.backends.cpu.ops"
BNB_KERNELS_NOTICE = "Failed to load CPU gemm_4bit_forward from kernels-community"


class DropKernelsHubNotice(logging.Filter):
    """Drops bitsandbytes' "Failed to load CPU gemm_4bit_forward from kernels-community" record."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(BNB_KERNELS_NOTICE)


def silence_kernels_hub_notice() -> None:
    """Install :class:`DropKernelsHubNotice` on bitsandbytes' CPU logger (before or after its import)."""
    logger = logging.getLogger(BNB_CPU_LOGGER)
    if not any(isinstance(f, DropKernelsHubNotice) for f in logger.filters):
        logger.addFilter(DropKernelsHubNotice())


def verbose_requested(argv: list[str]) -> bool:
    """``--verbose`` among the arguments, or ``LIGHTNING_FED_VERBOSE`` set to a true value."""
    return VERBOSE_FLAG in argv or os.environ.get(VERBOSE_ENV, "").lower() in ("1", "true", "yes", "on")


def _own(path: str) -> bool:
    return os.path.abspath(path).startswith(PACKAGE_DIR + os.sep) or path == PACKAGE_DIR


class OwnLines(logging.Filter):
    """Passes the package's records and any library's errors; holds back other libraries' notices."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or _own(record.pathname)


LIBRARY_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric")
"""Loggers that come with stream handlers of their own (``lightning/__init__.py``,
``lightning/pytorch/__init__.py``): filtered where they print, since a filter on a logger does
not see the records its children pass up."""

_verbose: bool | None = None
_progress_bars = True


def show_progress_bars(shown: bool) -> None:
    """Whether this run shows progress bars (its ``trainer.enable_progress_bar``, set by the CLI before the
    model is built): the bars libraries draw while it is built follow it
    (:func:`~lightning_fed.modules.backbone.gguf_cache`'s dequantization, red team 15 L7)."""
    global _progress_bars
    _progress_bars = shown


def progress_bars_shown() -> bool:
    """:func:`show_progress_bars`' setting (shown unless a run turned its progress bar off)."""
    return _progress_bars


def configure(verbose: bool) -> None:
    """Set up what this process prints; call first, before any library prints.

    Installs the warnings filter and the variables that transformers and datasets read at
    import, then filters Lightning's handlers (again in :func:`filter_library_handlers` once
    Lightning is imported: its handlers exist only from then on).
    """
    global _verbose
    _verbose = verbose
    silence_kernels_hub_notice()
    if verbose:
        os.environ[VERBOSE_ENV] = "1"  # the processes this one starts (Flower apps, stages) say as much
    else:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' "Loading weights" bar too
        os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("DATASETS_VERBOSITY", "error")
        if not getattr(warnings.showwarning, "_lightning_fed_quiet", False):
            warnings.showwarning = _own_warnings_only()
    filter_library_handlers()


def _own_warnings_only() -> Any:
    """``warnings.showwarning`` that prints the package's warnings as ``warning: <message>`` and no others.

    The file and line of the warning say nothing a user can act on (``--verbose`` shows them).
    """

    def show_own_warnings(
        message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        if _own(filename):
            (file or sys.stderr).write(f"warning: {message}\n")

    show_own_warnings._lightning_fed_quiet = True  # type: ignore[attr-defined]
    return show_own_warnings


OWN_HANDLER_LOGGERS = ("lightning.pytorch", "lightning.fabric")
"""Loggers Lightning gives a plain handler of their own (the message alone), and stops from passing
records up, only when the root logger has no handler as they are imported (their ``__init__.py``)."""


def own_handlers() -> None:
    """Give :data:`OWN_HANDLER_LOGGERS`, once imported, the handler Lightning gives them when the root
    logger has none. Opacus' ``logging.basicConfig`` at import (``opacus/utils/module_utils.py``), reached
    before Lightning when the precheck calibrates a private run's noise (``noise_calibration``), gave the
    root a handler: Lightning then left ``lightning.pytorch`` without its own, and the package's lines
    (``rank_zero_info``) reached the ``lightning`` logger's handler, ``%(levelname)s: %(message)s``:
    ``INFO: federation: 8 clients, ...`` (red team 12 row 8)."""
    for name in OWN_HANDLER_LOGGERS:
        logger = logging.getLogger(name)
        if name in sys.modules and not logger.handlers:
            logger.addHandler(logging.StreamHandler())
            logger.propagate = False


def filter_library_handlers() -> None:
    """Hold back other libraries' records on Lightning's own handlers, unless verbose.

    A no-op before :func:`configure` (in-process use of the package prints as Lightning does).
    """
    if _verbose is None:
        return
    own_handlers()
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if logger.handlers:
            # Lightning adds its handlers whether or not the root logger has one (a library's
            # `logging.basicConfig`, e.g. opacus' at import): a record would print twice.
            logger.propagate = False
        for handler in logger.handlers:
            handler.filters = [f for f in handler.filters if not isinstance(f, OwnLines)]
            if not _verbose:
                handler.addFilter(OwnLines())
