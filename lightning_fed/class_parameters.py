"""The options (``__init__`` parameters) of the package's strategies and round hooks, read from
their source files without importing them (importing a strategy imports torch: ~11 s of CPU).

:mod:`lightning_fed.config_values` uses them to refuse ``--federation.strategy.init_args.eta``
for ``FedAdam`` (an option it does not take) before torch is imported, naming the closest one,
instead of after the imports (the live parser's ``Option 'eta' is not accepted``). The names are
the signatures themselves (``ast``), so there is no list to keep in step with the classes:
``tests/test_option_rules.py`` compares them with :func:`inspect.signature` of the imported classes.

A class is followed through its package's ``__init__.py`` (``from lightning_fed.strategies.fedadam
import FedAdam``) to its module; a class without its own ``__init__``, or one that passes
``**kwargs`` on, adds its base classes' parameters (bases imported from the package's modules).
Anything not found this way gives ``None``: the live parser decides.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent
"""``lightning_fed/`` of this installation."""


@functools.cache
def _module(dotted: str) -> ast.Module | None:
    """The parsed source of ``lightning_fed.<...>`` (a module or a package's ``__init__``), or ``None``."""
    parts = dotted.split(".")
    if parts[0] != "lightning_fed":
        return None
    base = PACKAGE_ROOT.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            try:
                return ast.parse(path.read_text(encoding="utf-8"))
            except (OSError, SyntaxError, UnicodeDecodeError):
                return None
    return None


def _imported(tree: ast.Module, name: str) -> str | None:
    """The module ``name`` is imported from in ``tree`` (``from <module> import name``)."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if any((alias.asname or alias.name) == name for alias in node.names):
                return node.module
    return None


def _class(module: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
    """The module defining class ``name`` as seen from ``module``, and its definition."""
    tree = _module(module)
    if tree is None or depth > 4:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, node
    source = _imported(tree, name)
    return _class(source, name, depth + 1) if source else None


def parameters(package: str, class_path: str, depth: int = 0) -> frozenset[str] | None:
    """The keyword parameters of ``class_path`` (a short name or a path below ``package``), or
    ``None`` if they cannot be read here."""
    module, _, name = class_path.rpartition(".")
    found = _class(module or package, name)
    if found is None or depth > 8:
        return None
    where, node = found
    init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    own: set[str] = set()
    passes_on = init is None
    if init is not None:
        args = init.args
        own = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs][1:]}
        passes_on = args.kwarg is not None
        if args.vararg is not None:
            return None
    if passes_on:
        for base in node.bases:
            if not isinstance(base, ast.Name):
                return None
            if base.id in ("object", "ABC", "Generic"):
                continue
            source = _imported(_module(where) or ast.Module(body=[], type_ignores=[]), base.id) or where
            inherited = parameters(source, base.id, depth + 1)
            if inherited is None:
                return None
            own |= inherited
    return frozenset(own)
