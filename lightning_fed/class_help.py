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
"""

from __future__ import annotations

from lightning_fed.class_options import class_path_problem
from lightning_fed.option_rules import PACKAGES
from lightning_fed.trainer_classes import CLASS_OPTIONS, class_problem

HELP = ".help"
"""How an option asking for a class's help ends (jsonargparse's ``--<option>.help CLASS``)."""


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


def help_class_problem(args: list[str]) -> str | None:
    """The line refusing a ``--<option>.help CLASS`` (in the subcommand's ``args``) whose class the
    option's ``class_path`` would be refused for, naming the option (``--federation.hooks.help``), or
    ``None``."""
    for flag, class_path in _requests(args):
        option = flag[2 : -len(HELP)]
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
