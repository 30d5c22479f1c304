"""The class a ``--<option>.help CLASS`` asks about, checked before torch is imported.

``lightning-fed fit --federation.hooks.help RoundLRSchedule`` prints a round hook's options; the
live parser resolves the class only after torch, Lightning and transformers are imported (5-9 s of
CPU), and one it cannot load got jsonargparse's wording and a tip line, naming no class
(``error: --federation.hooks.help: module 'lightning_fed' has no attribute 'hooks'``, ``...:
Expected a dot import path string: NoSuchHook``; red team 15 L2). Here the class is checked as the
same option's ``class_path`` is (:func:`~lightning_fed.class_options.class_path_problem` for
``model``, ``data``, ``federation.strategy`` and ``federation.hooks``;
:func:`~lightning_fed.trainer_classes.class_problem` for Lightning's ``trainer.*`` classes) and a
class that certainly is none is refused in one line naming the option and the closest class. Any
other help (``--help``, ``--model.help`` without a class) is left to the live parser.

So is the class of an option inside a class (red team 16 B5): ``--data.partition.help ByKe`` (a
partitioner, :func:`~lightning_fed.nested_options.partition_class_problem`, when ``data:`` is the
package's module or unset) and ``--federation.strategy.strategy.help FedAdm`` (the strategy a wrapper
wraps, when the config's ``federation.strategy`` is one there), ``init_args`` or not in the option. The
live parser passed those to the data module's or the wrapper's own parser, which blamed the data
module (``error: data: unknown class_path 'lightning_fed.datamodules.FederatedDataModule'
(--partition.help: Expected a dot import path string: ByKe)``) after the imports, naming no class.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from lightning_fed.class_options import class_path_problem
from lightning_fed.nested_options import partition_class_problem
from lightning_fed.option_rules import PACKAGES, class_rules
from lightning_fed.trainer_classes import CLASS_OPTIONS, class_problem
from lightning_fed.wrapper_rules import wrapper_at

HELP = ".help"
"""How an option asking for a class's help ends (jsonargparse's ``--<option>.help CLASS``)."""
WRAPPED = re.compile(r"federation\.strategy(\.strategy)+")
"""The strategy a wrapper wraps (or one a wrapped wrapper wraps), named without ``init_args``."""


def _requests(args: list[str]) -> list[tuple[str, str]]:
    """``(--<option>.help, CLASS)`` of each help request given a class (``=CLASS`` or the next word)."""
    found = []
    for i, arg in enumerate(args):
        name, given, value = arg.partition("=")
        if not name.startswith("--") or not name.endswith(HELP):
            continue
        if not given:
            following = args[i + 1] if i + 1 < len(args) else ""
            value = following if following and not following.startswith("-") else ""
        if value:
            found.append((name, value))
    return found


def option_name(flag: str) -> str:
    """The option a ``--<option>.help`` asks about, without ``init_args`` (``data.partition`` of
    ``--data.init_args.partition.help``)."""
    return ".".join(part for part in flag[2 : -len(HELP)].split(".") if part != "init_args")


def asked_in(flag: str, args: Sequence[str]) -> str | None:
    """The ``--<option>.help`` of the command line ``args`` (as written) that a class's own parser was
    handed as ``flag``: jsonargparse gives what follows ``--data.`` in ``--data.partition.help`` to the
    data module's parser, as ``--partition.help``; ``None`` if none ends so."""
    inner = option_name(flag)
    for arg in args:
        name = arg.partition("=")[0]
        if name.startswith("--") and name.endswith(HELP) and (outer := option_name(name)).endswith(inner):
            if outer == inner or outer.endswith("." + inner):
                return name
    return None


def _without_requests(args: list[str]) -> list[str]:
    """``args`` without its help requests (and the class each names), whose values are no options."""
    kept: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        name, given, _ = arg.partition("=")
        if skip:
            skip = False
        elif arg in ("-h", "--help") or (name.startswith("--") and name.endswith(HELP)):
            following = args[i + 1] if i + 1 < len(args) else ""
            skip = not given and arg not in ("-h", "--help") and bool(following) and not following.startswith("-")
        else:
            kept.append(arg)
    return kept


def _sections(args: list[str]) -> dict[str, Any] | None:
    """The sections ``args``' files and overrides set, merged as the parser merges them, or ``None``
    if a file cannot be read (the live parser says so)."""
    from lightning_fed.config_values import merged_config
    from lightning_fed.shipped_configs import resolve_config_args

    merged = merged_config(resolve_config_args(_without_requests(args)))
    return merged.sections if merged is not None else None


def _inner_problem(option: str, flag: str, class_path: str, args: list[str]) -> str | None:
    """The line refusing the class asked about at ``option`` inside a class (module docstring), or ``None``."""
    if option != "data.partition" and not WRAPPED.fullmatch(option):
        return None
    sections = _sections(args)
    if sections is None:
        return None
    if option == "data.partition":
        data = sections.get("data")
        owner = data.get("class_path") if isinstance(data, dict) else None
        if data is not None and (not isinstance(owner, str) or class_rules("data", owner) is None):
            return None  # a data module of the user's: its partition may take a class of its own
        return partition_class_problem(flag, class_path)
    if wrapper_at(sections.get("federation.strategy"), option.rpartition(".")[0]) is None:
        return None  # no wrapper there: no such option, which the live parser says
    return class_path_problem("federation.strategy", {"class_path": class_path, "init_args": {}}, flag)


def help_class_problem(args: list[str]) -> str | None:
    """The line refusing a ``--<option>.help CLASS`` (in the subcommand's ``args``) whose class the
    option's ``class_path`` would be refused for, naming the option (``--federation.hooks.help``), or
    ``None``."""
    for flag, class_path in _requests(args):
        option = flag[2 : -len(HELP)]
        if problem := _inner_problem(option_name(flag), flag, class_path, args):
            return problem
        if option in PACKAGES:
            problem = class_path_problem(option, {"class_path": class_path, "init_args": {}}, flag)
        elif option.startswith("trainer.") and option.removeprefix("trainer.") in CLASS_OPTIONS:
            problem = class_problem(option.removeprefix("trainer."), class_path)
            problem = problem and problem.replace(option, flag, 1)
        else:
            continue
        if problem:
            return problem
    return None
