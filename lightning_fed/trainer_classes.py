"""Lightning's class-valued ``trainer.*`` options (``logger``, ``callbacks``, ``plugins``,
``profiler``, ``strategy``) checked before torch is imported.

The live parser resolves a short name only among the classes Lightning (and the package) has
imported, and a dotted path by importing it: both after 10-20 s of imports, a typo then named
with jsonargparse's wording and no close match. Here a short name must be one of the names
Lightning's subpackage exports (its ``__all__``, read from source without importing Lightning,
which imports torch) or one of the package's own subclasses of the option's base class; a dotted
path must resolve as :func:`~lightning_fed.class_paths.dotted_path_problem` tells from source.
Where the exports cannot be read nothing is refused. A Lightning callback's or logger's
``init_args`` must be parameters of its ``__init__``, of the types it annotates, and (a callback's)
values its constructor takes (:mod:`lightning_fed.lightning_init_args`); the closest key is named
(it was jsonargparse's ``Problem with given class_path ... Key 'patiencee' is not expected`` after
the imports). ``trainer.logger`` given a number is refused saying what it takes. A user's own
callback or logger is left to the live parser.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import Any

from lightning_fed.class_paths import dotted_path_problem, package_subclasses, short_name_problem
from lightning_fed.lightning_init_args import init_args_problem

LOGGER_FLAGS = ("true", "false")
"""``trainer.logger: true`` (Lightning's default logger) and ``false`` (none)."""
EXPORTS = {
    "logger": (("pytorch", "loggers"),),
    "callbacks": (("pytorch", "callbacks"),),
    "plugins": (("pytorch", "plugins"), ("fabric", "plugins", "environments")),
    "profiler": (("pytorch", "profilers"),),
    "strategy": (("pytorch", "strategies"),),
}
"""The Lightning subpackages whose exported classes each option takes by short name."""
BASES = {"logger": "Logger", "callbacks": "Callback", "plugins": "", "profiler": "Profiler", "strategy": ""}
"""The base class of the package's own classes an option also takes by short name ("": none)."""


@functools.cache
def lightning_exports(*parts: str) -> tuple[str, ...] | None:
    """The names ``lightning.<parts>`` exports (its ``__all__``, else the classes it imports or
    defines), read from its source without importing Lightning; ``None`` if it cannot be read."""
    spec = importlib.util.find_spec("lightning")  # the top-level package only: nothing imported
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent.joinpath(*parts, "__init__.py")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                names = ast.literal_eval(node.value)
            except ValueError:
                return None
            return tuple(names) if all(isinstance(n, str) for n in names) else None
    imported = [a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names]
    return tuple([*imported, *(n.name for n in tree.body if isinstance(n, ast.ClassDef))]) or None


def known_classes(option: str) -> list[str] | None:
    """The short names ``trainer.<option>`` takes, or ``None`` if Lightning's exports cannot be read."""
    names: list[str] = []
    for parts in EXPORTS[option]:
        found = lightning_exports(*parts)
        if found is None:
            return None
        names += found
    if BASES[option]:
        names += package_subclasses(BASES[option])
    return sorted({n for n in names if not n.startswith("_")})  # a private class is no option


def class_problem(option: str, value: Any) -> str | None:
    """The line refusing one class given to ``trainer.<option>`` (a name, a dotted path, or
    ``{class_path: ...}``) that certainly names no class it takes, or ``None``."""
    class_path = value.get("class_path") if isinstance(value, dict) else value
    if not isinstance(class_path, str) or not class_path.strip():
        return None
    key = f"trainer.{option}"
    if "." in class_path:
        return dotted_path_problem(key, class_path)
    known = known_classes(option)
    return None if known is None else short_name_problem(key, class_path, known)


def logger_problem(logger: Any) -> str | None:
    """``trainer.logger`` (one logger, or a list of them) naming no logger class; a word close
    to none of them is refused naming the flags too (``maybe``)."""
    items = logger if isinstance(logger, list) else [logger]
    for index, item in enumerate(items):
        if isinstance(item, str) and item.strip().lower() in LOGGER_FLAGS:
            continue
        key = f"trainer.logger[{index}]" if isinstance(logger, list) else "trainer.logger"
        if isinstance(item, (int, float, list)) and not isinstance(item, bool):
            return (
                f"{key} must be true (Lightning's default logger), false (none), a logger's class name or"
                f" class path (e.g. CSVLogger), a mapping {{class_path: ..., init_args: {{...}}}}"
                f"{'' if isinstance(logger, list) else ' or a list of them'}, got {item!r}"
            )
        problem = class_problem("logger", item)
        exports = lightning_exports(*EXPORTS["logger"][0])
        if problem and isinstance(item, str) and "." not in item and "did you mean" not in problem and exports:
            return (
                f"trainer.logger must be true, false, a logger class ({', '.join(exports)}) or its class path"
                f" (with the init_args it requires, e.g. CSVLogger's save_dir), got {item!r}"
            )
        if problem:
            return problem
        if problem := init_args_problem("logger", key, item, exports or ()):
            return problem
    return None


def callback_options_problem(key: str, value: Any) -> str | None:
    """An ``init_args`` key or value Lightning's callback ``value`` (``{class_path: EarlyStopping,
    init_args: {...}}``; ``key``: ``trainer.callbacks[0]``) does not take, with the closest or what it
    takes (:func:`~lightning_fed.lightning_init_args.init_args_problem`); ``None`` otherwise."""
    return init_args_problem("callbacks", key, value, lightning_exports(*EXPORTS["callbacks"][0]) or ())


def callbacks_problem(callbacks: Any) -> str | None:
    """``trainer.callbacks`` (one callback, or a list of them) naming no callback class, or giving
    Lightning's callback an option it does not take."""
    items = callbacks if isinstance(callbacks, list) else [callbacks]
    for index, item in enumerate(items):
        if problem := class_problem("callbacks", item):
            return problem
        key = f"trainer.callbacks[{index}]" if isinstance(callbacks, list) else "trainer.callbacks"
        if problem := callback_options_problem(key, item):
            return problem
    return None


def trainer_classes_problem(trainer: dict[str, Any]) -> str | None:
    """``trainer.logger``, ``trainer.callbacks``, ``trainer.plugins`` and a ``trainer.strategy`` /
    ``trainer.profiler`` class naming no class (the functions above)."""
    if problem := logger_problem(trainer.get("logger")):
        return problem
    if problem := callbacks_problem(trainer.get("callbacks")):
        return problem
    plugins = trainer.get("plugins")
    for item in plugins if isinstance(plugins, list) else [plugins]:
        if problem := class_problem("plugins", item):
            return problem
    for option in ("strategy", "profiler"):  # a name is Lightning's table's (trainer_options.py)
        if isinstance(trainer.get(option), dict) and (problem := class_problem(option, trainer[option])):
            return problem
    return None


CLASS_OPTIONS = ("logger", "callbacks", "plugins", "profiler", "strategy")
"""``trainer.*`` options that take a class (its ``init_args`` set as ``--trainer.<option>.<key>``)."""
APPENDED = ("logger", "callbacks", "plugins")
"""The ones that take a list, appended to with ``--trainer.<option>+=<class>`` (jsonargparse's ``+=``)."""


def append_class(trainer: dict[str, Any], option: str, value: Any) -> None:
    """``--trainer.callbacks+=EarlyStopping``: ``value`` (a class name or a mapping) after the classes
    ``trainer.<option>`` holds (one class given alone is a list of one)."""
    given = trainer.get(option)
    items = list(given) if isinstance(given, list) else ([] if given is None else [given])
    trainer[option] = [*items, value]


def set_class_option(trainer: dict[str, Any], option: str, keys: list[str], value: Any) -> None:
    """``--trainer.callbacks.patience=5``: an ``init_args`` key of the class ``trainer.<option>``
    names, of the last one of a list (as jsonargparse applies it after ``--trainer.callbacks+=...``;
    Lightning's documented form). A form not followed here (no class yet, a nested key) drops the
    option from what is checked: the live parser decides."""
    keys = keys[1:] if keys[:1] == ["init_args"] else keys
    given = trainer.get(option)
    items = list(given) if isinstance(given, list) else ([] if given is None else [given])
    last = items[-1] if items else None
    last = {"class_path": last, "init_args": {}} if isinstance(last, str) else last
    init_args = last.get("init_args", {}) if isinstance(last, dict) else None
    if len(keys) != 1 or not isinstance(last, dict) or not isinstance(init_args, dict) or "class_path" not in last:
        trainer.pop(option, None)
        return
    items[-1] = {**last, "init_args": {**init_args, keys[0]: value}}
    trainer[option] = items if isinstance(given, list) else items[-1]
