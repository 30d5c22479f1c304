"""What ``lightning-fed fit|validate|test`` can check before torch is imported (seconds of CPU).

Building the LightningCLI's parser imports torch, Lightning, transformers and PEFT: 10-20 s of
CPU before a mistyped key could be reported. These checks need only the YAML files, the shipped
configs' names and the option names of the stored ``--help`` page
(:mod:`lightning_fed.help_pages`), which ``tests/test_cli_help.py`` keeps equal to the live
parser's:

- a shipped config's name (``--config feddpo``) is resolved, an unknown one refused
  (:func:`~lightning_fed.shipped_configs.resolve_config`);
- each ``--config`` file exists (or is a config written inline), is UTF-8, valid YAML (the error
  names the file, line and column) and a mapping;
- every key of a config file and every ``--section.option`` on the command line is an option of
  the subcommand, or the error names the file and the closest option. Abbreviations are not
  options (``--federation.local_step`` is not ``local_steps``; the live parser refuses them too,
  ``allow_abbrev=False``). Below a class-valued option (``model``, ``data``,
  ``federation.strategy``, ``trainer.callbacks``...: its ``init_args`` depend on the class)
  no key is checked against the help page; the options of the package's own strategies and round
  hooks are read from their source (:mod:`lightning_fed.class_parameters`) and an option they do
  not take is refused with the closest; so are the package's ``model:`` and ``data:`` classes'
  keys (their ``backbone`` and ``lora`` too), the types their signatures annotate and the name
  tables their values are looked up in (:mod:`lightning_fed.class_options`), a word for
  ``seed_everything``; a ``class_path`` that certainly names no class (of ``model``, ``data``,
  the strategy, a round hook, ``trainer.logger``, ``trainer.callbacks``, ``trainer.plugins``: a
  short name none of the package's or Lightning's classes has, a module not installed, a name its
  source does not bind, a function, the standard library; :mod:`lightning_fed.class_paths`,
  :mod:`lightning_fed.trainer_classes`) is refused with the closest class; the live parser checks
  the rest;
- the values, merged from the files and overrides as jsonargparse merges them, against the
  rules the package's config classes raise with (:mod:`lightning_fed.option_rules`: ranges,
  integers, choices of ``model.*`` and ``data.*`` per class, ``federation.*``, the package's
  strategies and round hooks, ``seed_everything``) and Lightning's ``trainer.*`` bounds
  (:mod:`lightning_fed.config_values`), its callbacks' and loggers' ``init_args`` (keys, types,
  the values their constructors refuse: :mod:`lightning_fed.lightning_init_args`), an accelerator
  the installed torch build cannot run (:mod:`lightning_fed.accelerator_builds`), a
  ``data.dataset`` (``val_dataset``, ``test_dataset``) empty or a path to nothing
  (:mod:`lightning_fed.data_paths`), ``data.synthetic_args``' sizes, the data options that must
  fit each other and ``federation.clients_per_round`` against ``data.num_clients``
  (:mod:`lightning_fed.data_cross_rules`), a ``model.backbone.config`` key its transformers config
  class does not take or a ``model_type`` the installed transformers does not know
  (:mod:`lightning_fed.transformers_configs`), a model or tokenizer that cannot load offline
  (:mod:`lightning_fed.model_sources`); then ``trainer.default_root_dir`` must be writable;
- ``predict`` (removed) is refused with what to use instead. A user's own class, and what else
  depends on another option, are left to the live parser.

The option names are used only when the stored page is the live parser's page for the installed
libraries (:func:`lightning_fed.help_pages.stored_page`); otherwise the files and the values are
checked, not the names.
An error is one line on stderr and exit status 2 (:data:`~lightning_fed.errors.EXIT_USER_ERROR`): a
:class:`~lightning_fed.errors.ConfigRefusal` (no ``--debug`` hint) or the line written before
``SystemExit(2)``; a value a ``--config`` file set names that file (:func:`_in_file`), an argument
error adds the subcommand's tip as the live parser does.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from lightning_fed.class_help import help_class_problem
from lightning_fed.class_sections import last_hook_note
from lightning_fed.config_values import (
    option_problem,
    test_set_problem,
    unknown_option,
    validation_set_problem,
    value_problem,
)
from lightning_fed.errors import (
    _REPLACED_OPTIONS,
    EXIT_USER_ERROR,
    ConfigRefusal,
    UserError,
    config_shape_error,
    help_tip,
)
from lightning_fed.strict_parser import closest_name

LIGHTNING_SUBCOMMANDS = ("fit", "validate", "test")
REMOVED = {
    "predict": "`lightning-fed predict` was removed: the objectives here score pairs and have no forward to"
    " predict with; generate answers to a prompts file with `lightning-fed evaluate --run <run> --benchmarks [judge]`"
    " (or [humaneval], [lm_eval])",
}
"""Subcommands that are gone, with what to use instead (exit 2, before torch is imported)."""
_OPTION = re.compile(r"^  (-\w, )?--([\w.]+)", re.M)
CONFIG_FLAGS = ("--config", "-c")
_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")
"""A negative number is a value, not an option (argparse's ``_negative_number_matcher``)."""
NULLS = ("null", "none", "~")
"""How YAML (jsonargparse's reader) writes ``None`` on the command line."""
REQUIRED = ("data", "model")
"""The sections ``fit``, ``validate`` and ``test`` cannot run without (the LightningCLI's ``model`` and ``data``)."""


class Options:
    """The option names of one subcommand's ``--help`` page, and the ones whose values are classes."""

    def __init__(self, page: str) -> None:
        self.names = {m.group(2) for m in _OPTION.finditer(page)}
        # `--model.help CLASS_PATH_OR_NAME`: `model` takes a class, its keys (init_args) depend on it
        self.classes = {name[: -len(".help")] for name in self.names if name.endswith(".help")}
        self.groups = {
            name
            for name in self.names
            if name not in self.classes and any(other.startswith(name + ".") for other in self.names)
        }

    def known(self, key: str) -> bool:
        """Whether ``key`` (dotted) is an option, or lies below an option that takes a class."""
        parts = key.split(".")
        return key in self.names or any(".".join(parts[:i]) in self.classes for i in range(1, len(parts)))

    def closest(self, key: str) -> str | None:
        """The option most like ``key``, preferring those of the same section."""
        section = key.rsplit(".", 1)[0] if "." in key else ""
        candidates = sorted(n for n in self.names if not n.endswith(".help"))
        same = [n for n in candidates if section and n.startswith(section + ".")]
        for pool in (same, candidates):
            if match := difflib.get_close_matches(key, pool, n=1, cutoff=0.6):
                return match[0]
        return None

    def unknown_keys(self, mapping: dict[Any, Any], prefix: str = "") -> Iterator[str]:
        """The keys of a config mapping (dotted, in file order) that are no option."""
        for raw, value in mapping.items():
            key = f"{prefix}{raw}"
            if key in self.groups and isinstance(value, dict):
                yield from self.unknown_keys(value, key + ".")
            elif not self.known(key) and str(raw) not in _REPLACED_OPTIONS:
                yield key


def _refuse(message: str) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    raise SystemExit(EXIT_USER_ERROR)


def _usage_error(subcommand: str, message: str) -> NoReturn:
    """An argument error as the live parser reports it (:class:`~lightning_fed.federated_cli.FederatedArgumentParser`):
    the line, then where the options are listed."""
    sys.stderr.write(f"error: {message}\n{help_tip(f'lightning-fed {subcommand}')}\n")
    raise SystemExit(EXIT_USER_ERROR)


def _shape_problem(args: list[str]) -> str | None:
    """The line argparse refuses the arguments' shape with: an option without its value
    (``--federation.rounds`` last, or before another option), or words no option takes (``foo``)."""
    stray: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and not arg.startswith("--") and not _NEGATIVE.match(arg):
            if arg.split("=", 1)[0] not in ("-c", "-h"):  # `-federation.rounds=2`: argparse's -f, then junk
                return f"unknown option {arg.split('=', 1)[0]}; did you mean -{arg}?"
        if arg.startswith("--=") or arg == "---" or arg.startswith("---"):
            return f"{arg!r} names no option; write --<section>.<option>=<value> (e.g. --federation.rounds=2)"
        if not arg.startswith("-") or _NEGATIVE.match(arg):
            stray.append(arg)
            i += 1
            continue
        word = args[i + 1] if i + 1 < len(args) else None
        if arg.endswith("=") and word is not None and (not word.startswith("-") or _NEGATIVE.match(word)):
            # `--federation.rounds= 2`: the shell split it; argparse takes "" and calls `2` unrecognized
            name = arg[:-1]
            return f"argument {name}: empty value after '='; did you mean {name}={word} (no space after '=')?"
        if "=" in arg or arg in ("-h", "--help") or arg.startswith("--print_config"):
            i += 1
            continue
        value = args[i + 1] if i + 1 < len(args) else None
        if value is None or (value.startswith("-") and not _NEGATIVE.match(value)):
            name = "-c/--config" if arg in CONFIG_FLAGS else arg
            return f"argument {name}: expected one argument"
        i += 2
    return f"unrecognized arguments: {' '.join(stray)}" if stray else None


PRINT_CONFIG_FLAGS = ("", "skip_default", "skip_unset", "skip_null", "comments")
"""The flags jsonargparse's ``--print_config=<flags>`` takes (``skip_null``: its deprecated
name of ``skip_unset``; ``comments`` needs ruamel.yaml, which the live parser then checks)."""


def _asking_problem(args: list[str]) -> str | None:
    """``-h=1`` or ``--print_config=bad``, as argparse and jsonargparse refuse them (after the
    imports, 12 s of CPU, on baaf8e7): a help flag takes no value, print_config only its flags."""
    for arg in args:
        name, given, value = arg.partition("=")
        if given and name in ("-h", "--help"):
            return f"argument -h/--help: ignored explicit argument {value!r}"
        if given and name == "--print_config" and (bad := [f for f in value.split(",") if f not in PRINT_CONFIG_FLAGS]):
            return f'Invalid option "{bad[0]}" for --print_config'
    return None


def _missing_sections(args: list[str], subcommand: str) -> str | None:
    """``model`` or ``data`` given by no ``--config`` file and no option (``lightning-fed fit`` alone),
    as the live parser says it; ``None`` if a config is inline or unreadable (not followed here)."""
    given: set[str] = set()
    cleared: dict[str, str] = {}
    for i, arg in enumerate(args):
        if arg in CONFIG_FLAGS or arg.startswith("--config="):
            path = arg.split("=", 1)[1] if "=" in arg else args[i + 1]
            try:
                loaded = _load(path) if Path(path).is_file() else None
            except UserError:
                return None
            if not isinstance(loaded, dict):
                return None
            given |= {str(key) for key, value in loaded.items() if value is not None or key not in REQUIRED}
        elif arg.startswith("--"):
            name = arg[2:].split("=", 1)[0].split(".", 1)[0].rstrip("+")
            value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
            if name in REQUIRED and arg[2:].split("=", 1)[0] == name and value.strip().lower() in NULLS:
                given.discard(name)  # `--model=null`: jsonargparse unsets it, then finds it missing
                cleared[name] = f"--{name}={value}"
            else:
                given.add(name)
                cleared.pop(name, None)
    for name in REQUIRED:
        if name not in given and name in cleared:
            example = "a class such as DPOModule" if name == "model" else "a class such as PreferenceDataModule"
            return f"{cleared[name]}: {subcommand} needs {name} ({example}, or a config file), got null"
    missing = [f"{subcommand}.{name}" for name in REQUIRED if name not in given]
    return f"{', '.join(missing)}: required but missing from the config" if missing else None


def _config_paths(args: list[str]) -> Iterator[str]:
    for i, arg in enumerate(args):
        if arg in CONFIG_FLAGS and i + 1 < len(args):
            yield args[i + 1]
        elif arg.startswith("--config="):
            yield arg.split("=", 1)[1]


def _load(path: str) -> Any:
    import yaml  # jsonargparse's dependency; a few milliseconds

    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigRefusal(f"config {path!r} is not UTF-8 text (byte {err.start}: {err.reason})") from None
    try:
        loaded = yaml.safe_load(text)
        if duplicate := _duplicate_key(yaml.compose(text, Loader=yaml.SafeLoader)):
            _refuse(f"config {path!r}: {duplicate}")
        return loaded
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        _refuse(f"config {path!r} is not valid YAML{where}: {err.problem or err.context}")
    except yaml.YAMLError as err:
        _refuse(f"config {path!r} is not valid YAML: {' '.join(str(err).split())}")


def _duplicate_key(node: Any, where: str = "", above: frozenset[int] = frozenset()) -> str | None:
    """The first key given twice in one mapping of the YAML node tree, as ``line N: duplicate key ...``,
    or an alias inside its own anchor (``a: &x [*x]``: a structure that contains itself, which every
    reader of the config would follow forever).

    YAML forbids a repeated key, but PyYAML keeps the last value silently (``federation: {rounds: 2,
    rounds: 3}`` would run 3 rounds); jsonargparse reads the file the same way.
    """
    import yaml

    if id(node) in above:
        return f"line {node.start_mark.line + 1}: an alias refers to the anchor that contains it (a recursive value)"
    above = above | {id(node)}
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = str(key.value) if isinstance(key, yaml.ScalarNode) else None
            if name is not None and name != "<<":  # `<<: *anchor` (a merge) may repeat
                if name in seen:
                    section = f"in {where}" if where else "at the top level"
                    return f"line {key.start_mark.line + 1}: duplicate key {name!r} {section}"
                seen.add(name)
            inner = f"{where}.{name}" if where and name is not None else (name or where)
            if found := _duplicate_key(value, inner, above):
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            if found := _duplicate_key(item, f"{where}[{i}]", above):
                return found
    return None


def _check_file(path: str, options: Options | None, subcommand: str) -> None:
    loaded = _load(path)
    if problem := config_shape_error(path, loaded):
        raise ConfigRefusal(problem)
    if options is None:
        return
    for key in options.unknown_keys(loaded):
        near = options.closest(key)
        hint = f"; did you mean {near}?" if near else f"; lightning-fed {subcommand} --help lists every option"
        _refuse(f"config {path!r}: unknown key {key}{hint}")


def _inline(text: str) -> bool:
    """Whether a ``--config`` value that is no file is a config written inline (jsonargparse
    reads ``--config '{seed_everything: 1}'`` as the file's text)."""
    from lightning_fed.yaml_reading import load, load_errors

    try:
        return isinstance(load(text), dict)
    except load_errors():  # not YAML either: a path that does not exist
        return False


def _check_option(arg: str, options: Options, subcommand: str) -> None:
    name = arg[2:].split("=", 1)[0].rstrip("+")
    if not name or arg in CONFIG_FLAGS or name == "config" or options.known(name) or name in _REPLACED_OPTIONS:
        return
    near = options.closest(name) or closest_name(name, ["config"])  # `-c CONFIG, --config`: not in Options.names
    hint = f"; did you mean --{near}?" if near else f"; lightning-fed {subcommand} --help lists every option"
    if (item := _INDEXED.fullmatch(name)) and options.known(last := item[1] + item[3]):
        hint = (  # red team 8 row 20: `did you mean --federation.on_large_update?` for a hook's option
            f"; a list's item is not indexed on the command line: --{last} sets the last item's option,"
            f" --{item[1]}='[...]' gives the whole list"
        )
    _refuse(f"unknown option --{name} for `lightning-fed {subcommand}`{hint}")


_INDEXED = re.compile(r"(.+?)\[(\d+)\](\..+)")
"""``federation.hooks[0].init_args.deadline``: (the list, the index, the item's option)."""


def _sources(args: list[str]) -> Iterator[tuple[int, str | None]]:
    """``(end, path)`` of each ``--config`` file (``path``) and command-line option (``None``) in
    ``args``, in order: ``args[:end]`` holds it and everything before it."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in CONFIG_FLAGS and i + 1 < len(args):
            yield i + 2, args[i + 1]
            i += 2
        elif arg.startswith("--config="):
            yield i + 1, arg.split("=", 1)[1]
            i += 1
        elif arg.startswith("--") and "=" not in arg and i + 1 < len(args) and not args[i + 1].startswith("--"):
            yield i + 2, None  # `--key value`
            i += 2
        else:
            yield i + 1, None
            i += 1


def value_setters(args: list[str], options: list[str]) -> dict[str, tuple[Any, str | None]]:
    """``{option: (value, setter)}`` for each of ``options`` (named as the lines name them, without
    ``init_args``): its value merged from ``args`` as jsonargparse merges them (:data:`UNSET` where
    nothing sets it) and the ``--config`` file that set it last (``None``: an option on the command line,
    or nothing). A file or option that sets it to the same value again (``"0.25"`` after ``0.25``: the parser
    reads both as 0.25) is not its setter (the earlier one is); one
    :class:`~lightning_fed.config_values.Merged` that each file and option is merged into once."""
    from lightning_fed.config_values import UNSET, Merged
    from lightning_fed.yaml_reading import numbers_read

    last: dict[str, Any] = dict.fromkeys(options, UNSET)
    setter: dict[str, str | None] = dict.fromkeys(options)
    merged, readable, start = Merged(), True, 0
    for end, path in _sources(args):
        if options:
            readable = readable and merged.apply_arguments(args[start:end])
            start = end
            for option in options:
                value = numbers_read(merged.value_at(option)) if readable else UNSET  # "0.25" is 0.25 (B04)
                if value != last[option]:
                    last[option], setter[option] = value, path
    return {option: (last[option], setter[option]) for option in options}


_VALUE = re.compile(r"(?<![\w.])([a-z_]+(?:\.[A-Za-z_]+|\[\d+\])+)=([^\s,;()]+?)(?=[\s,;()]|:(?:\s|$)|$)")
"""An ``option=value`` a line reports (``federation.rounds=2``), ending before a space, ``,;()`` or ``: ``."""


def source_of(value: Any, path: str | None) -> str:
    """Where a value came from, as a line names it: ``config '<file>'``, ``the command line`` (an option there,
    or a config written inline) or ``default`` (nothing sets it, or it is set to null)."""
    from lightning_fed.config_values import UNSET

    if value is UNSET or value is None:
        return "default"
    return f"config {path!r}" if path is not None and Path(path).is_file() else "the command line"


def with_sources(args: list[str], problem: str) -> str:
    """``problem`` with every ``option=value`` in it followed by where that value came from
    (:func:`source_of` of :func:`value_setters`): ``federation.rounds=2 (config 'dp.yaml')``. For a line that
    holds several values against each other (a privacy budget over the run's rounds and sample rate), which
    may each come from another file, the command line or the default (red team 15 M8); its advice names
    options without a value (``lower federation.rounds``), so only the values are followed by a source."""
    found = value_setters(args, list(dict.fromkeys(m.group(1) for m in _VALUE.finditer(problem))))
    return _VALUE.sub(lambda m: f"{m.group(0)} ({source_of(*found[m.group(1)])})", problem)


def _in_file(
    args: list[str],
    problem: str,
    check: Callable[[list[str]], str | None],
    subject: str | None = None,
    other: str | None = None,
) -> str:
    """``problem`` prefixed with the ``--config`` file that brought it (``config 'my_run.yaml': ...``),
    unchanged if an option on the command line brought it.

    ``check`` (:func:`~lightning_fed.config_values.option_problem`, ``value_problem``...) is asked
    of the arguments up to each file and option in turn: the one that brought ``problem`` is the
    last after which ``check`` says ``problem`` and before which it did not. As jsonargparse
    merges, a later file or option that sets the key again wins (it names its own value, or no
    file); a file or option that sets it to the same value again changes no line and is not named
    (the earlier file is). A cross-check's line names the source of the value it reports
    (:func:`value_setters`).
    ``subject``: the option whose value the line reports (``option=value ...``), named the same way; a
    default's (``count_stddev`` unset: ``m / 20``) is the file that set the nearest option above it
    (``federation.strategy.adaptive``). ``other``: a second option the line names in parentheses
    (``(federation.strategy has ...)``), whose file, where another, is named there (``..., config 'b.yaml')``).
    """
    from lightning_fed.config_values import UNSET

    before, source = None, None
    parts = subject.split(".") if subject is not None else []
    options = [".".join(parts[:n]) for n in range(len(parts), 1, -1)]  # the option, then the ones above it
    if subject is None and (found := _SUBJECT.match(problem)):
        options = [found.group(1)]  # a cross-check's: its option's value alone (a default: the line's source)
    options += [other] if other is not None else []
    for end, path in _sources(args):
        now = check(args[:end])
        if now == problem and before != problem:
            source = path
        before = now
    setters = value_setters(args, options)
    last = {option: value for option, (value, _) in setters.items()}
    setter = {option: path for option, (value, path) in setters.items() if value is not UNSET}
    # the line reports its option's value: the file (or option) that set it is named, not the one that set
    # the other option it is held against (red team 10 row 10)
    if set_option := next((o for o in options if o != other and last[o] is not UNSET), None):
        source = setter[set_option]
    if other is not None and (where := setter.get(other)) not in (None, source) and Path(where).is_file():
        start = max(problem.find(f"({other} "), problem.find(f"({other}="))  # `(<option> has ...`, `(<option>=<value>`
        end = problem.find(")", start)
        if start >= 0 and end >= 0:  # the other option's own file, beside it
            problem = f"{problem[:end]}, config {where!r}{problem[end:]}"
    return f"config {source!r}: {problem}" if source is not None and Path(source).is_file() else problem


def named_source(err: BaseException, argv: list[str]) -> BaseException:
    """``err``, a :class:`~lightning_fed.errors.ValueRefusal` of ``fit``/``validate``/``test`` (``argv``: the
    command line after ``lightning-fed``: a privacy budget refused once the data is read), each value its line
    reports followed by where it came from (:func:`with_sources`); any other error as it is."""
    from lightning_fed.errors import ValueRefusal
    from lightning_fed.shipped_configs import resolve_config_args

    if not isinstance(err, ValueRefusal) or err.option is None or not argv or argv[0] not in LIGHTNING_SUBCOMMANDS:
        return err
    args = resolve_config_args([a for a in argv[1:] if not a.startswith("--print_config")])
    err.args = (with_sources(args, str(err)),)  # the traceback (--debug) kept
    return err


_SUBJECT = re.compile(r"((?:[a-z_]+)(?:\.[A-Za-z_]+|\[\d+\])+) must be in \[[^\]]*=")
"""A cross-check's line whose first option is the value it reports against another option's
(``federation.hooks[0].concurrency must be in [1, data.num_clients=3], got 4``)."""


def _not_a_file(path: Path) -> str:
    """Why a ``--config`` value that is neither a regular file nor a config written inline cannot be
    read: a folder, a device or FIFO (``/dev/null`` exists; jsonargparse would read it as nothing,
    a FIFO would block), or nothing at all."""
    if path.exists() and not path.is_dir():
        return "is not a regular file (a device, FIFO or socket); give a YAML file"
    why = "is a folder, not a file" if path.is_dir() else "does not exist"
    return f"{why} (nor is it a shipped config: lightning-fed configs lists them)"


def precheck_arguments(argv: list[str], shown_as: str | None = None) -> None:
    """Refuse, before torch is imported, what the live parser would refuse (module docstring).

    ``argv`` is the command line after ``lightning-fed``; ``shown_as``: the subcommand an argument
    error and its tip name, when not ``argv[0]`` (``plan`` checks its config as ``fit``'s). Raises
    :class:`ConfigRefusal` or ``SystemExit(2)`` (the message already written); returns when nothing
    is wrong that can be seen here.
    """
    if argv and argv[0] in REMOVED:
        raise ConfigRefusal(REMOVED[argv[0]])
    if not argv or argv[0] not in LIGHTNING_SUBCOMMANDS:
        return
    subcommand, args = argv[0], argv[1:]
    if problem := _asking_problem(args):
        _usage_error(subcommand, problem)
    if any(a in ("-h", "--help") or a.partition("=")[0].endswith(".help") for a in args):
        if problem := help_class_problem(args):  # `--federation.hooks.help NoSuchHook` (class_help.py)
            _refuse(problem)
        return  # the live parser prints what was asked for (`--federation.hooks.help X`: a class's options)
    printing = any(a.startswith("--print_config") for a in args)
    if printing:  # the config it prints is checked as fit checks it: a refused value is no config to save
        args = [a for a in args if not a.startswith("--print_config")]
    elif problem := _shape_problem(args):
        _usage_error(subcommand, problem)
    from lightning_fed.help_pages import stored_page
    from lightning_fed.shipped_configs import resolve_config_args

    args = resolve_config_args(args)
    page = stored_page(subcommand)
    options = Options(page) if page is not None else None
    for path in _config_paths(args):
        if Path(path).is_file():
            _check_file(path, options, subcommand)
        elif not _inline(path):
            _refuse(f"--config {path!r}: {_not_a_file(Path(path))}")
    if options is not None:
        values = {i + 1 for i, a in enumerate(args) if a.startswith("--") and "=" not in a}  # `--key value`
        for i, arg in enumerate(args):
            if arg.startswith("--") and i not in values:
                _check_option(arg, options, subcommand)
    if problem := unknown_option(args):  # a strategy's or round hook's option (lightning_fed/class_parameters.py)
        _refuse(last_hook_note(args, _in_file(args, problem, unknown_option)))
    if problem := option_problem(args):  # a key or value the model's / data's class cannot take (class_options.py)
        _refuse(_in_file(args, problem, option_problem))
    named = shown_as or subcommand
    if not printing and (problem := _missing_sections(args, named)):  # `fit --print_config`: the template
        _usage_error(named, problem)
    if problem := value_problem(args):  # the config classes' own rules (lightning_fed/option_rules.py)
        from lightning_fed.federation_rules import is_sampling_rate_line
        from lightning_fed.private_run_rules import cache_options
        from lightning_fed.wrapper_rules import is_count_split_line

        if is_count_split_line(problem) or is_sampling_rate_line(problem):  # values held against each other
            raise ConfigRefusal(with_sources(args, problem))  # each followed by its own file (red team 15 M8)
        options = cache_options(problem)  # two options, each named with its own file
        raise ConfigRefusal(_in_file(args, problem, value_problem, *(options or (None, None))))  # one line
    if subcommand in ("validate", "test"):  # trainer.limit_<set>_batches=0 scores nothing (loop_conflicts.py)
        from lightning_fed.config_values import evaluation_limit_of

        check = partial(evaluation_limit_of, stage=subcommand)
        if problem := check(args):
            raise ConfigRefusal(_in_file(args, problem, check))  # the --config file that set it, if one did
    if subcommand == "test" and (problem := test_set_problem(args)):  # lightning_fed/stage_sets.py
        raise ConfigRefusal(problem)
    if subcommand == "validate" and (problem := validation_set_problem(args)):  # a file's val_fraction: named
        raise ConfigRefusal(_in_file(args, problem, validation_set_problem))
