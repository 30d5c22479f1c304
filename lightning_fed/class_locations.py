"""Where a class of the package (or of Lightning) is defined, found from the source files without
importing them (importing a strategy or a module imports torch: ~11 s of CPU).

A class is followed through its package's ``__init__.py`` (``from lightning_fed.strategies.fedadam
import FedAdam``) to the module that defines it; a round hook's short name is looked up in every
package that holds round hooks. :mod:`lightning_fed.class_parameters` reads the options of the
class found here; :mod:`lightning_fed.class_options` and :mod:`lightning_fed.class_kinds` ask whether
a module binds a class and by which path a config names it.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import re
from pathlib import Path

from lightning_fed.hook_rules import HOOK_PACKAGES
from lightning_fed.option_rules import PACKAGES

PACKAGE_ROOT = Path(__file__).resolve().parent
"""``lightning_fed/`` of this installation."""
READ = ("lightning_fed", "lightning")
"""The packages whose classes are read here: the package's own, and Lightning's (its callbacks'
options: ``trainer.callbacks``, :mod:`lightning_fed.trainer_classes`)."""


@functools.cache
def _root(package: str) -> Path | None:
    """The folder of the installed top-level ``package`` (one of :data:`READ`), found without importing it."""
    if package == "lightning_fed":
        return PACKAGE_ROOT
    spec = importlib.util.find_spec(package) if package in READ else None  # the top level only: nothing imported
    return Path(spec.origin).parent if spec is not None and spec.origin else None


@functools.cache
def module_tree(dotted: str) -> ast.Module | None:
    """The parsed source of ``lightning_fed.<...>`` or ``lightning.<...>`` (a module or a package's
    ``__init__``), or ``None``."""
    parts = dotted.split(".")
    root = _root(parts[0])
    if root is None:
        return None
    base = root.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            try:
                return ast.parse(path.read_text(encoding="utf-8"))
            except (OSError, SyntaxError, UnicodeDecodeError):
                return None
    return None


def imported_from(tree: ast.Module, name: str) -> str | None:
    """The module ``name`` is imported from in ``tree`` (``from <module> import name``)."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if any((alias.asname or alias.name) == name for alias in node.names):
                return node.module
    return None


def class_definition(module: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
    """The module defining class ``name`` as seen from ``module``, and its definition."""
    tree = module_tree(module)
    if tree is None or depth > 4:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, node
    source = imported_from(tree, name)
    return class_definition(source, name, depth + 1) if source else None


def located(package: str, class_path: str) -> tuple[str, ast.ClassDef] | None:
    """The module defining ``class_path`` (a path, or a short name seen from ``package``) and its
    definition. A round hook's short name is looked up in every package of
    :data:`~lightning_fed.hook_rules.HOOK_PACKAGES` (``RoundLRSchedule`` lives in ``callbacks``,
    ``ClientRanks`` in ``heterogeneity``; the live parser takes them by short name as
    ``ClientGrouping`` of ``round_hooks``)."""
    module, _, name = class_path.rpartition(".")
    if module:
        return class_definition(module, name)
    searched = HOOK_PACKAGES if package == PACKAGES["federation.hooks"] else (package,)
    return next((found for p in searched if (found := class_definition(p, name)) is not None), None)


def exported_path(package: str, name: str) -> str | None:
    """The dotted path a config names the package's class ``name`` by (``<package>.<name>``; a round hook
    in the first package of :data:`~lightning_fed.hook_rules.HOOK_PACKAGES` that binds it:
    ``lightning_fed.callbacks.RoundLRSchedule``), or ``None`` if no such package binds it."""
    searched = HOOK_PACKAGES if package == PACKAGES["federation.hooks"] else (package,)
    return next((f"{p}.{name}" for p in searched if class_definition(p, name) is not None), None)


def bound_class(module: str, name: str) -> bool:
    """Whether the source of ``module`` (``lightning_fed.<...>``) defines or imports a class ``name``, or
    exports it lazily (a package whose ``__init__`` lists ``name`` in ``__all__`` and loads it in its
    ``__getattr__``: ``lightning_fed.deploy.SecureAggregation``); a module with no source file binds none
    (unlike :func:`defined`, which leaves it to the parser)."""
    if class_definition(module, name) is not None:
        return True
    tree = module_tree(module)
    return tree is not None and name in _all_names(tree)


def _all_names(tree: ast.Module) -> list[str]:
    """The names a module's literal ``__all__`` lists (none when it has no literal one)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                return [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def defined(module: str, name: str) -> bool:
    """Whether ``module`` (``lightning_fed.<...>``) defines or imports a class ``name``, as far as
    its source shows (a module that cannot be read counts as defining it: nothing is refused)."""
    if module_tree(module) is None:
        return True
    return class_definition(module, name) is not None


SEARCHED_FILES = 2000
"""The most source files a package is searched through for the closest class (:func:`closest_class`):
Lightning has ~270, the package ~400; a larger one (torch, ~3,000) is not read for a hint."""
_CLASS_STATEMENT = re.compile(r"^class ([A-Za-z]\w*)\b", re.M)


@functools.cache
def _package_classes(top: str) -> tuple[dict[str, set[str]], dict[str, set[str]]] | None:
    """The classes of the installed top-level package ``top``, read from its source files without
    importing it: (class name -> the public packages whose ``__init__`` binds it, by an import or
    ``__all__``; class name -> the public modules whose top level defines it). ``None`` if ``top`` is
    no folder of sources here, or has more than :data:`SEARCHED_FILES`."""
    try:
        spec = importlib.util.find_spec(top)  # the top level only: nothing imported
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    exported: dict[str, set[str]] = {}
    defined: dict[str, set[str]] = {}
    for folder in spec.submodule_search_locations:
        paths = sorted(Path(folder).rglob("*.py"))
        if len(paths) > SEARCHED_FILES:
            return None
        for path in paths:
            parts = path.relative_to(folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            if any(p.startswith("_") or not p.isidentifier() for p in parts):
                continue  # a private module is no path a config names a class by
            module = ".".join((top, *parts))
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            for name in _CLASS_STATEMENT.findall(text):
                defined.setdefault(name, set()).add(module)
            if path.name == "__init__.py":
                for name in _init_bindings(text):
                    exported.setdefault(name, set()).add(module)
    return exported, defined


def _init_bindings(text: str) -> set[str]:
    """The names a package's ``__init__`` source binds by ``from ... import`` or lists in ``__all__``."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return set()
    names = set(_all_names(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names if alias.name != "*")
    return names


def closest_class(class_path: str) -> str | None:
    """The real class of the installed top-level package ``class_path`` starts with that is closest to
    it, read from source (:func:`_package_classes`): a class of the same name (else the closest name),
    at the public path closest to the one given (a package exporting it before the module defining it:
    ``lightning.pytorch.callback.ModelCheckpoint`` -> ``lightning.pytorch.callbacks.ModelCheckpoint``,
    ``lightning_fed.hooks.round_lr.RoundLRSchedule`` -> ``lightning_fed.callbacks.RoundLRSchedule``).
    ``None`` if the package cannot be searched or holds no class close to it."""
    module, _, name = class_path.rpartition(".")
    found = _package_classes(module.partition(".")[0]) if module else None
    if found is None:
        return None
    exported, defined = found
    # class names share endings (Logger, Checkpoint, Strategy): a high cutoff, or any word is "close"
    near = [name] if name in defined else difflib.get_close_matches(name, sorted(defined), n=1, cutoff=0.75)
    if not near:
        return None
    places = sorted(exported.get(near[0], set()) or defined[near[0]])
    best = max(places, key=lambda place: (difflib.SequenceMatcher(None, module, place).ratio(), -len(place)))
    return f"{best}.{near[0]}"
