"""What a failure means to the process running ``lightning-fed``: its exit code and message.

A script or scheduler can rely on the exit status:

=====  =======================================================================
code   meaning
=====  =======================================================================
0      success
1      a failure during training (a bug, a diverging run, too few valid updates)
2      something the user must fix: arguments, config, data, checkpoint
130    interrupted by Ctrl-C (SIGINT); ``last.ckpt`` holds the last complete round
143    terminated by SIGTERM (SLURM, Kubernetes...); same checkpoint as above
=====  =======================================================================

Code anywhere in the package (and the ``evaluate``/``plan`` subcommands) raises
:class:`UserError` (a ``ValueError``) for input the user must fix. Before training starts,
the usual exceptions of bad input (``ValueError``, ``FileNotFoundError``, YAML errors...)
count as user errors too; once training runs, only :class:`UserError` does.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import errno
import importlib
import os
import re
import signal
import sys
import tempfile
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

from lightning_fed.strict_parser import StrictParser, close_option

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USER_ERROR = 2
EXIT_SIGINT = 128 + signal.SIGINT  # 130
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143

DEBUG_FLAG = "--debug"
DEBUG_ENV = "LIGHTNING_FED_DEBUG"
HINT = f"(run with {DEBUG_FLAG} or {DEBUG_ENV}=1 for the traceback)"


def help_tip(prog: str) -> str:
    """The line after an argument error: where the options are listed (``prog``: ``lightning-fed fit``,
    the subcommand named whenever one is known)."""
    return f"tip: {prog} --help lists every option"


class UserError(ValueError):
    """Input the user must fix (arguments, config, data, checkpoint): exit status 2, one line (no
    ``--debug`` hint: :func:`after_error`)."""


class ArgumentsError(UserError):
    """Arguments a subcommand's parser refuses: reported as ``error: <line>`` and the
    :func:`help_tip` naming ``prog`` (``lightning-fed report``), as ``fit``'s are, instead of the
    ``--debug`` hint (the traceback of a parse says nothing more)."""

    def __init__(self, message: str, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


class ConfigRefusal(UserError):
    """A config or its values refused from their text, before torch is imported
    (:mod:`lightning_fed.config_precheck`)."""


class ValueRefusal(UserError):
    """A config value refused once the run is built (a DP-SGD budget no noise multiplier reaches over the
    clients' local steps, known once their data is read), its line starting with ``option=<value>``: the
    process follows each value in it with the config file that set it
    (:func:`lightning_fed.config_precheck.named_source`), as the precheck's lines do (issue 41, M11; red team
    15 M8)."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


def after_error(err: BaseException, debug: bool) -> str | None:
    """The line printed after ``error: ...``: the tip for an argument error; the ``--debug`` hint for
    an error that is not the package's :class:`UserError` (a library's exception, a failure during
    training), whose message alone may not say where it came from; nothing for another
    :class:`UserError` (its one line names the option, value, file or row: the traceback adds
    nothing a user acts on; ``--debug`` still prints it) or when the traceback is already shown."""
    if isinstance(err, ArgumentsError):
        return help_tip(err.prog)
    return None if debug or isinstance(err, UserError) else HINT


class CheckpointError(UserError):
    """A checkpoint that cannot be used: missing, truncated, corrupt or from another config."""


class Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler outside a fit (like ``KeyboardInterrupt``)."""


# Raised by bad input before training starts: exit 2 then, exit 1 once training runs.
_INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,  # includes UnicodeDecodeError and json.JSONDecodeError
    TypeError,
    KeyError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    ImportError,
    argparse.ArgumentError,  # jsonargparse's parse errors under --debug
)


_INPUT_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG})
"""``OSError`` numbers that mean a path the user gave cannot be used (before training: exit 2)."""


def _is_yaml_error(err: BaseException) -> bool:
    try:
        import yaml
    except ImportError:  # pragma: no cover - yaml is a dependency of jsonargparse
        return False
    return isinstance(err, yaml.YAMLError)


def exit_code(err: BaseException, training_started: bool) -> int:
    """The process exit status for ``err`` (see the module table)."""
    # Lightning's SIGTERMException can only have been raised once Lightning is imported: a
    # subcommand that never imports it (`--help`, `flower`) must not pay for the import here.
    lightning_exceptions = sys.modules.get("lightning.pytorch.utilities.exceptions")
    sigterm = (Terminated,) + ((lightning_exceptions.SIGTERMException,) if lightning_exceptions else ())
    if isinstance(err, sigterm):
        return EXIT_SIGTERM
    if isinstance(err, KeyboardInterrupt):
        return EXIT_SIGINT
    if isinstance(err, SystemExit):
        code = err.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_FAILURE)
    if isinstance(err, UserError):
        return EXIT_USER_ERROR
    if not training_started and (isinstance(err, _INPUT_ERRORS) or _is_yaml_error(err)):
        return EXIT_USER_ERROR
    if not training_started and isinstance(err, OSError) and err.errno in _INPUT_ERRNOS:
        return EXIT_USER_ERROR  # e.g. a read-only output folder (EROFS is not a PermissionError)
    return EXIT_FAILURE


def one_line(err: BaseException) -> str:
    """``err``'s message on one line (``KeyError`` without its quotes, the type when empty)."""
    text = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
    text = " ".join(str(text).split())
    if not text:
        return type(err).__name__
    if isinstance(err, (UserError, FileNotFoundError)) or type(err) is ValueError:
        return text
    return f"{type(err).__name__}: {text}"


_BOOLEAN = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def take_flag(argv: list[str], flag: str) -> tuple[bool | None, list[str]]:
    """Whether the boolean ``flag`` was given anywhere in ``argv`` (``flag``, ``flag=<bool>``,
    ``flag <bool>``; ``None``: not given), and ``argv`` without it. A ``flag=<value>`` that is not a
    boolean is left in ``argv``."""
    given: bool | None = None
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == flag:
            value = argv[i + 1].lower() if i + 1 < len(argv) else ""
            given = _BOOLEAN.get(value, True)
            i += 2 if value in _BOOLEAN else 1
            continue
        if arg.startswith(flag + "=") and arg.split("=", 1)[1].lower() in _BOOLEAN:
            given = _BOOLEAN[arg.split("=", 1)[1].lower()]
        else:
            rest.append(arg)
        i += 1
    return given, rest


def take_debug(argv: list[str]) -> tuple[bool, list[str]]:
    """Whether a traceback was asked for, and ``argv`` without the ``--debug`` flag.

    ``--debug``, ``--debug=<bool>`` and ``--debug <bool>`` (``true``/``false``, ``yes``/``no``,
    ``on``/``off``, ``1``/``0``) are read before or after the subcommand; without one,
    ``LIGHTNING_FED_DEBUG`` decides. (``--debug false`` used to turn debug *on* and leave
    ``false`` behind as a stray argument: issue 34 item 8.) A ``--debug=<value>`` that is not a
    boolean is left in ``argv`` for the subcommand's parser to refuse.
    """
    debug, rest = take_flag(argv, DEBUG_FLAG)
    if debug is None:
        debug = os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    return debug, rest


def debug_requested(argv: list[str]) -> bool:
    """``--debug`` (or ``--debug=true``...) among the arguments, or ``LIGHTNING_FED_DEBUG`` set to a true value."""
    return take_debug(argv)[0]


# ---------------------------------------------------------------- jsonargparse messages
_CLASS_PATH = re.compile(r"Problem with given class_path '([^']+)': (.*?)(?= - |$)")
_REQUIRED = re.compile(r"the following arguments are required: (.*?)(?= - |$)")
_PARSER_KEY = re.compile(r'^Parser key "([^"]+)":\s*(.*)$')
_ARG_REASON = re.compile(r"^(\w+): (.+)$")  # an argument of the class named in the reason
_NOT_FOUND = ("has no attribute", "No module named", "Unable to import", "not a subclass", "import")
_SHORT_NAME = re.compile(r"Expected a dot import path string: (\S+)")
_TOP_SHORT_NAME = re.compile(r"Errors: - Expected a dot import path string: (\S+)")  # the union's own value
_NESTED = re.compile(r"NestedArg\(key='[^']*', val=(.*)\)")
_NOT_ACCEPTED = re.compile(r"Option '(\w+)' is not accepted")
_REPLACED_OPTIONS = {  # an option that was removed -> what replaces it
    "eval_clients": "data.eval_clients (the first k clients) was removed: use federation.eval_clients"
    " (all, sampled or panel) and federation.eval_panel_size",
}


def _join(key: str | None, sub: str) -> str:
    sub = sub.replace("init_args.", "")
    return f"{key}.{sub}" if key else sub


_NON_FINITE_GIVEN = re.compile(r"Given value: ([+-]?(?:nan|inf|infinity))$", re.IGNORECASE)


def simplify_parse_error(message: str, objectives: Callable[[], Iterable[str]] | None = None) -> str:
    """Say which class_path is unknown or which key is missing instead of jsonargparse's union dump.

    jsonargparse reports a bad ``class_path`` or a missing ``init_args`` key as "Does not
    validate against any of the Union subtypes ..." with every subtype's reason in one line
    of 1,000+ characters; the reason that matters is buried in it. ``objectives`` lists the
    objectives' short names for an unknown ``model`` (the CLI passes the module registry's:
    this module sits below ``lightning_fed.modules`` and does not import it).
    """
    message = " ".join(message.split())
    key = m.group(1) if (m := _PARSER_KEY.match(message)) else None
    if key and "<class 'float'>" in message and (m := _NON_FINITE_GIVEN.search(message)):  # `=nan` for a number
        return f"{key} must be a finite number, got {m.group(1)}"
    if (m := _NOT_ACCEPTED.search(message)) and m.group(1) in _REPLACED_OPTIONS:
        return _REPLACED_OPTIONS[m.group(1)]
    if m := _REQUIRED.search(message):
        missing = [_join(key, k.strip()) for k in m.group(1).split(",") if k.strip()]
        return f"{', '.join(missing)}: required but missing from the config"
    if key == "federation.strategy" and (m := _SHORT_NAME.search(message)):  # a short name no strategy has
        from lightning_fed.strategies.registry import available_strategies

        names = ", ".join(available_strategies())
        return f"{key}: no strategy named {m.group(1)!r}; by short name: {names}; or give a full class path"
    if key == "model" and objectives is not None and (m := _TOP_SHORT_NAME.search(message)):  # no objective has it
        names = ", ".join(objectives())
        return f"{key}: no objective named {m.group(1)!r}; by short name: {names}; or give a full class path"
    if m := _CLASS_PATH.search(message):
        class_path, reason = m.group(1), m.group(2).strip()
        if _PARSER_KEY.match(reason):  # the class is fine, one of its arguments is not
            return _join(key, simplify_parse_error(message[m.start(2) :]))
        if arg := _ARG_REASON.match(reason):  # "lora: Expected a dot import path string: big"
            if scalar := _scalar_for_mapping(class_path, arg.group(1), message):
                return f"{_join(key, arg.group(1))} must be a mapping with keys {scalar[0]}, got {scalar[1]}"
            return f"{_join(key, arg.group(1))}: {arg.group(2)}"
        if any(s in reason for s in _NOT_FOUND):
            return f"{key + ': ' if key else ''}unknown class_path {class_path!r} ({reason})"
        return f"{key + ' ' if key else ''}({class_path}): {reason}"
    if key and "Errors:" in message:  # a union none of whose types fits: the first real reason
        reasons = [r.strip() for r in message.split("Errors:", 1)[1].split(" - ") if r.strip()]
        reasons = [r for r in reasons if not r.startswith("Expected a <class 'NoneType'>")]
        if reasons:
            return f"{key}: {reasons[0]}"
    if key and (rest := _PARSER_KEY.match(message).group(2).lstrip(" -")):
        return f"{key}: {rest.split(' - ')[0][:300]}"
    return message[:500]


def _scalar_for_mapping(class_path: str, arg: str, message: str) -> tuple[str, str] | None:
    """(its keys, the value given) when argument ``arg`` of ``class_path`` takes a dataclass (a
    mapping in YAML, e.g. ``model.lora``) and was given a scalar or a list; else ``None``.

    jsonargparse reads a scalar there as a class path ("Expected a dot import path string:
    big") or an implicit subclass ("Not a valid subclass of LoraSettings"), naming neither what
    the option is nor its keys (issue 34 item 10).
    """
    if "Given value: " not in message:
        return None
    text = message.rsplit("Given value: ", 1)[1]
    if nested := _NESTED.fullmatch(text):
        text = nested.group(1)
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, dict):  # the section given as a mapping: the scalar is inside it
        value = (value.get("init_args") or {}).get(arg, {})
    if isinstance(value, dict):
        return None  # a mapping: its own keys are checked by the parser
    try:
        module, _, name = class_path.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None
    for klass in getattr(cls, "__mro__", ()):
        try:
            hint = typing.get_type_hints(klass.__init__).get(arg)
        except Exception:  # noqa: BLE001 - an annotation that does not resolve: look no further up
            continue
        for option in typing.get_args(hint) or (hint,):
            if dataclasses.is_dataclass(option):
                return ", ".join(f.name for f in dataclasses.fields(option)), repr(value)
    return None


def unwritable(folder: str | Path) -> str | None:
    """Why no file can be written into ``folder`` (created first if missing), or ``None`` if one can.

    Probed with a temporary file in ``folder`` or in its nearest existing parent, removed at once
    (permission bits say nothing for root or on a read-only mount): checked before a model is
    loaded or an evaluation runs, instead of failing when the results are written (issue 34
    item 6).
    """
    existing = Path(folder).expanduser().absolute()
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        return f"{str(existing)!r} is a file, not a folder"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        return f"cannot write into {str(existing)!r} ({err.strerror or type(err).__name__})"
    return None


def config_shape_error(path: str, loaded: Any) -> str | None:
    """Why a loaded YAML config file cannot be a ``lightning-fed`` config, or ``None`` if it can."""
    if loaded is None:
        return f"config {path!r} is empty: expected a mapping with model:, data:, federation:, trainer: sections"
    if not isinstance(loaded, dict):
        return (
            f"config {path!r} holds a {type(loaded).__name__}, expected a mapping with model:, data:,"
            " federation:, trainer: sections"
        )
    return None


class OneLineParser(StrictParser):
    """A :class:`~lightning_fed.strict_parser.StrictParser` whose every error is an :class:`ArgumentsError`
    (``error: <message>``, the tip naming the subcommand, exit status 2 from
    :func:`lightning_fed.cli.console_main`), without argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        raise ArgumentsError(close_option(self, message), self.prog)
