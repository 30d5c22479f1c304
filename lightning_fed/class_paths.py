"""Whether a config's ``class_path`` names a class, told from source files without importing them.

A class-valued option (``model:``, ``data:``, ``federation.strategy``, each of ``federation.hooks``,
``trainer.logger``, ``trainer.callbacks``) is resolved by the live parser only after torch,
Lightning and transformers are imported (10-20 s of CPU), and a typo then gets jsonargparse's
wording with every name it knows and no close match. Here a ``class_path`` is refused before
those imports only where it is certainly no class the parser could load:

- a short name (``FedAdm``) that is none of the classes the option takes by short name (the
  package's own, read from its source, and Lightning's exported loggers and callbacks), unless
  an installed plugin could add one: the closest name is given;
- a dotted path whose module is not installed (:func:`importlib.util.find_spec` on the top-level
  package only, which imports nothing; the rest of the path is followed as files:
  ``lightning.pytorch.callback.ModelCheckpoint``, unless the module above it may bind that name,
  a class holding a class), with the closest real class of its installed package
  (:func:`~lightning_fed.class_locations.closest_class`), or whose module's source binds no such
  name (``lightning.pytorch.callbacks.ModelCheckpont``: the closest class of that module is given,
  else the closest class of its package: ``lightning_fed.strategies.RoundLRSchedule``),
  or binds it to a function (``mypkg.make_model``);
- a path into Python's standard library (``os.system``): no LightningModule, data module,
  strategy, round hook, logger or callback is one.

A module this cannot read to the end (compiled, a ``from x import *`` from a module not read here,
a module ``__getattr__``, a lazy module) is left to the live parser. A user's own class
(``my_pkg.MyModule``, found on the path the parser imports from) passes.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import re
import sys
from pathlib import Path

from lightning_fed.class_locations import closest_class

PACKAGE_ROOT = Path(__file__).resolve().parent
_CLASS = re.compile(r"^class (\w+)\(([^)]*)\)", re.M)


@functools.cache
def package_subclasses(base: str) -> frozenset[str]:
    """The names of the package's classes deriving, directly or through one another, from a class
    named ``base`` (``RoundHook``, ``Strategy``, ``Callback``), read from every source file of
    ``lightning_fed/`` (its class statements; a base is matched by its last dotted part)."""
    edges: list[tuple[str, set[str]]] = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for name, bases in _CLASS.findall(text):
            edges.append((name, {b.strip().rpartition(".")[2].split("[")[0] for b in bases.split(",")}))
    found = {base}
    changed = True
    while changed:
        changed = False
        for name, bases in edges:
            if name not in found and bases & found:
                found.add(name)
                changed = True
    return frozenset(found - {base})


def _bound(body: list[ast.stmt], depth: int = 0) -> tuple[dict[str, str], bool]:
    """The names a module's top level binds (``class``, ``function``, ``other``) and whether it
    may bind names not seen here (a module ``__getattr__``, ``sys.modules[...] =``, an ``import *``
    from a module whose source is not read here: ``lightning.pytorch``'s ``from
    lightning.pytorch.__about__ import *`` is read, and binds its names)."""
    names: dict[str, str] = {}
    open_ended = False
    for node in body:
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            star, more = _star_names(node, depth)
            names.update(star)
            open_ended |= more
            continue
        if isinstance(node, ast.ClassDef):
            names[node.name] = "class"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = "function" if names.get(node.name) != "class" else "class"
            open_ended |= node.name == "__getattr__"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    open_ended = True
                else:
                    names[alias.asname or alias.name.split(".")[0]] = "other"
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names[leaf.id] = "other"
                    elif isinstance(leaf, ast.Subscript):
                        open_ended = True  # `sys.modules[__name__] = _LazyModule(...)`
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            inner = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
            for handler in getattr(node, "handlers", []):
                inner += handler.body
            found, more = _bound(inner, depth)
            for name, kind in found.items():
                names[name] = "other" if name in names and names[name] != kind else kind
            open_ended |= more
    return names, open_ended


def _star_names(node: ast.ImportFrom, depth: int) -> tuple[dict[str, str], bool]:
    """The names ``from <module> import *`` binds (those its literal ``__all__`` lists, else the public
    names its source binds; none from a module that is certainly not installed, which such a guarded
    import leaves out) and whether it may bind more than seen here."""
    source = _source(node.module) if node.module and node.level == 0 and depth < 4 else None
    if source == "missing":
        return {}, False
    if not isinstance(source, Path):
        return {}, True
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return {}, True
    names, open_ended = _bound(tree.body, depth + 1)
    for item in tree.body:
        if isinstance(item, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in item.targets):
            try:
                listed = ast.literal_eval(item.value)
            except ValueError:
                return {}, True
            return {str(n): names.get(str(n), "other") for n in listed}, open_ended
    return {n: k for n, k in names.items() if not n.startswith("_")}, open_ended


def _source(module: str) -> Path | str | None:
    """The source file of ``module`` (dotted), found without importing anything; ``"missing"`` if
    certainly not installed; ``None`` if it cannot be told here (a compiled module, a frozen one)."""
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])  # a top-level name: found, not imported
    except (ImportError, ValueError):
        return None
    if spec is None:
        return "missing"
    if len(parts) == 1:
        origin = spec.origin
        return Path(origin) if origin and origin.endswith(".py") else None
    folders = list(spec.submodule_search_locations or [])
    if not folders:
        return "missing"  # a plain module has no submodules
    for i, part in enumerate(parts[1:], start=1):
        last = i == len(parts) - 1
        nxt: list[str] = []
        for folder in folders:
            base = Path(folder) / part
            if last and base.with_suffix(".py").is_file():
                return base.with_suffix(".py")
            if (base / "__init__.py").is_file():
                if last:
                    return base / "__init__.py"
                nxt.append(str(base))
            elif base.is_dir():
                nxt.append(str(base))  # a namespace package
            elif any(Path(folder).glob(f"{part}.*.so")) or any(Path(folder).glob(f"{part}.*.pyd")):
                return None  # compiled
        if not nxt and not last:
            return "missing"
        if last:
            return None if nxt else "missing"
        folders = nxt
    return None


def dotted_path_problem(option: str, class_path: str) -> str | None:
    """The line refusing ``class_path`` (dotted) of ``option`` where its source shows it is no
    class (module docstring), or ``None``."""
    module, _, name = class_path.rpartition(".")
    top = module.split(".")[0]
    if top in sys.stdlib_module_names:
        return f"{option}: class_path {class_path!r} is in Python's standard library, not a class the option takes"
    source = _source(module)
    if source == "missing" and "." in module and _may_be_attribute(module):
        return None  # maybe a class inside a class (`pkg.mod.Outer.Inner`), which the parser follows too
    if source == "missing":
        return missing_module_problem(option, class_path)
    if not isinstance(source, Path):
        return None
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    names, open_ended = _bound(tree.body)
    kind = names.get(name)
    if kind == "function":
        return f"{option}: class_path {class_path!r} is a function, not a class"
    if kind is not None or open_ended:
        return None
    if (source.name == "__init__.py") and (
        (source.parent / f"{name}.py").is_file() or (source.parent / name / "__init__.py").is_file()
    ):
        return f"{option}: class_path {class_path!r} is a module, not a class"
    classes = sorted(n for n, k in names.items() if k != "function" and n[:1].isupper())
    near = difflib.get_close_matches(name, classes, n=1, cutoff=0.75)
    closest = f"{module}.{near[0]}" if near else closest_class(class_path)  # elsewhere in the package
    hint = f"; did you mean {closest}?" if closest else ""
    return f"{option}: class_path {class_path!r}: module {module!r} has no class {name!r}{hint}"


def _may_be_attribute(module: str) -> bool:
    """Whether ``module`` (dotted, no such module installed) may still name something its parent binds
    (``pkg.mod.Outer`` of ``pkg.mod.Outer.Inner``, a class inside a class, which the parser follows):
    unless the parent's source is read to the end and binds no such name."""
    parent, _, last = module.rpartition(".")
    source = _source(parent)
    if source == "missing":
        return False
    if not isinstance(source, Path):
        return True
    try:
        names, open_ended = _bound(ast.parse(source.read_text(encoding="utf-8")).body)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return True
    return open_ended or last in names


def missing_module_problem(option: str, class_path: str) -> str | None:
    """The line refusing ``class_path`` whose module is not installed, with the closest real class of
    its installed top-level package beside it (:func:`~lightning_fed.class_locations.closest_class`),
    or ``None``. Not for a path that may end in a class inside a class (:func:`dotted_path_problem`
    leaves those to the parser)."""
    module, _, name = class_path.rpartition(".")
    if not module or _source(module) != "missing":
        return None
    near = closest_class(class_path)
    hint = f"; did you mean {near}?" if near else ""
    return f"{option}: class_path {class_path!r}: no module named {module!r} is installed{hint}"


def closest_name(name: str, known: list[str] | tuple[str, ...] | set[str]) -> str | None:
    """The one of ``known`` closest to the misspelt class name ``name``, or ``None``: what a short
    ``class_path`` (:func:`short_name_problem`) and ``--data.partition=NAME``
    (``class_options._choice_problem``) both name."""
    # the names share endings (Logger, Checkpoint): a higher cutoff than the options', or any word is "close"
    near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return near[0] if near else None


def short_name_problem(option: str, name: str, known: list[str] | tuple[str, ...]) -> str | None:
    """The line refusing ``name`` (no dots) of ``option`` if it is none of ``known`` (with the closest)."""
    if name in known or not name.isidentifier():
        return None
    near = closest_name(name, known)
    hint = f"did you mean {near}?" if near else f"one of {', '.join(sorted(known))}, or a class's dotted path"
    return f"{option}: unknown class_path {name!r}; {hint}"
