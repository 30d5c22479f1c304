"""The options (``__init__`` parameters, with their annotations) of the package's classes, the
fields of its config dataclasses and its name tables, read from their source files without
importing them (importing a strategy or a module imports torch: ~11 s of CPU).

:mod:`lightning_fed.config_values` uses them to refuse ``--federation.strategy.init_args.eta``
for ``FedAdam`` (an option it does not take) before torch is imported, naming the closest one,
instead of after the imports (the live parser's ``Option 'eta' is not accepted``), and
:mod:`lightning_fed.class_options` to check the ``model:`` and ``data:`` classes' keys, types and
names (``data.template`` against ``TEMPLATE_CHOICES``...). The names are the signatures and tables
themselves (``ast``), so there is no list to keep in step with the classes:
``tests/test_option_rules.py`` and ``tests/test_class_options.py`` compare them with
:func:`inspect.signature` of the imported classes and with the imported tables.

A class is found where :mod:`lightning_fed.class_locations` finds it (followed through its package's
``__init__.py`` to its module); a class without its own ``__init__``, or one that passes
``**kwargs`` on, adds its base classes' parameters (bases imported from the package's modules).
Anything not found this way gives ``None``: the live parser decides.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from lightning_fed.class_locations import class_definition, imported_from, located, module_tree

Annotated = dict[str, tuple[ast.expr | None, str]]
"""Parameter name -> (its annotation as written, or ``None``; the module it is written in)."""


def signature(package: str, class_path: str, depth: int = 0) -> Annotated | None:
    """The keyword parameters of ``class_path`` (a short name or a path below ``package``) with
    their annotations, or ``None`` if they cannot be read here. A parameter a class takes itself
    wins over its base's of the same name."""
    found = located(package, class_path)
    if found is None or depth > 8:
        return None
    where, node = found
    init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    own: Annotated = {}
    passes_on = init is None
    if init is not None:
        args = init.args
        own = {a.arg: (a.annotation, where) for a in [*args.posonlyargs, *args.args, *args.kwonlyargs][1:]}
        passes_on = args.kwarg is not None
        if args.vararg is not None and not passes_on:  # `*args` alone: positional only, not followed
            return None
    if passes_on:  # `**kwargs` (and `*args`) go on to the base class, as jsonargparse follows them
        for base in node.bases:
            if not isinstance(base, ast.Name):
                return None
            if base.id in ("object", "ABC", "Generic"):
                continue
            source = imported_from(module_tree(where) or ast.Module(body=[], type_ignores=[]), base.id) or where
            inherited = signature(source, base.id, depth + 1)
            if inherited is None:
                return None
            own = {**inherited, **own}
    return own


def takes_any_keyword(package: str, class_path: str) -> bool:
    """Whether ``class_path``'s own ``__init__`` takes ``**kwargs`` (where they go is not followed
    here: Lightning's ``ModelSummary`` hands them to ``summarize``), or cannot be read here."""
    found = located(package, class_path)
    if found is None:
        return True
    init = next((f for f in found[1].body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    return init is not None and init.args.kwarg is not None


def parameters(package: str, class_path: str) -> frozenset[str] | None:
    """The keyword parameters of ``class_path`` (a short name or a path below ``package``), or
    ``None`` if they cannot be read here."""
    found = signature(package, class_path)
    return None if found is None else frozenset(found)


def fields(module: str, name: str) -> Annotated | None:
    """The fields of the dataclass ``name`` as seen from ``module`` (its annotated class-level
    names, in order), or ``None`` if it is not found or not a plain ``@dataclass``."""
    found = class_definition(module, name)
    if found is None:
        return None
    where, node = found
    if node.bases or not any(_decorator_name(d) == "dataclass" for d in node.decorator_list):
        return None
    return {
        item.target.id: (item.annotation, where)
        for item in node.body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
    }


def _decorator_name(node: ast.expr) -> str | None:
    node = node.func if isinstance(node, ast.Call) else node
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def table(module: str, name: str, depth: int = 0) -> object:
    """The value of the module-level name table ``name`` as seen from ``module``, evaluated from
    the source without importing it: string constants, tuples, and the keys of dictionaries
    (``TEMPLATES: dict[str, PromptTemplate] = {"alpaca": ALPACA, ...}`` gives ``{"alpaca": None,
    ...}``), combined as the source combines them (``(*TEMPLATES, CHAT)``). ``None`` if it
    cannot be read here."""
    tree = module_tree(module)
    if tree is None or depth > 6:
        return None
    value = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            value = node.value
    if value is None:
        source = imported_from(tree, name)
        return table(source, name, depth + 1) if source else None
    if isinstance(value, ast.Dict):
        keys = [table_expression(module, k, depth) if k is not None else None for k in value.keys]
        return dict.fromkeys(keys) if all(isinstance(k, str) for k in keys) else None
    return table_expression(module, value, depth)


def table_expression(module: str, node: ast.expr, depth: int = 0) -> object:
    """``node`` (an expression of ``module``) evaluated with the module's tables it names (:func:`table`)
    and no builtins; ``None`` if a name cannot be read or the expression needs more."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    bound = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    scope: dict[str, object] = {"__builtins__": {}}
    for used in names - bound:
        scope[used] = table(module, used, depth + 1)
        if scope[used] is None:
            return None
    try:
        return eval(compile(ast.Expression(node), module, "eval"), scope)  # noqa: S307 - the package's own source
    except Exception:  # noqa: BLE001 - an expression this reader cannot evaluate: unknown
        return None


def registered(module: str, decorator: str) -> tuple[str, ...]:
    """The names functions of ``module`` are registered under with ``@decorator("name")``, in order."""
    tree = module_tree(module)
    names = []
    for node in tree.body if tree is not None else []:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            for d in node.decorator_list:
                if isinstance(d, ast.Call) and _decorator_name(d) == decorator and d.args:
                    arg = d.args[0]
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        names.append(arg.value)
    return tuple(names)


def subclasses(module: str, base: str) -> tuple[str, ...]:
    """The classes of ``module`` that derive from ``base`` (directly or through one another)."""
    tree = module_tree(module)
    found = {base}
    changed = True
    classes = [n for n in (tree.body if tree is not None else []) if isinstance(n, ast.ClassDef)]
    while changed:
        changed = False
        for node in classes:
            if node.name not in found and any(isinstance(b, ast.Name) and b.id in found for b in node.bases):
                found.add(node.name)
                changed = True
    return tuple(n.name for n in classes if n.name in found and n.name != base)


def class_chain(package: str, class_path: str, depth: int = 0) -> Iterator[tuple[str, ast.ClassDef]]:
    """The class, then the package's classes it derives from, depth first and left to right (the
    method resolution order of the package's classes, which share no base twice)."""
    found = located(package, class_path)
    if found is None or depth > 8:
        return
    yield found
    where, node = found
    tree = module_tree(where)
    for base in node.bases:
        if isinstance(base, ast.Name) and tree is not None:
            yield from class_chain(imported_from(tree, base.id) or where, base.id, depth + 1)


def function_parameters(module: str, name: str) -> Annotated | None:
    """The keyword parameters of the module-level function ``name`` as seen from ``module`` (its
    definition or the module it is imported from), with their annotations; ``None`` if not found
    or if it takes ``**kwargs``."""
    tree = module_tree(module)
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            args = node.args
            if args.kwarg is not None:
                return None
            return {a.arg: (a.annotation, module) for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    source = imported_from(tree, name)
    return function_parameters(source, name) if source else None


def function_definition(module: str, name: str, depth: int = 0) -> ast.FunctionDef | None:
    """The definition of the module-level function ``name`` as seen from ``module`` (there, or in
    the module it is imported from), or ``None``."""
    tree = module_tree(module)
    if tree is None or depth > 4:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    source = imported_from(tree, name)
    return function_definition(source, name, depth + 1) if source else None


def table_names(module: str, name: str) -> dict[str, str] | None:
    """The module-level dictionary ``name`` of ``module`` whose values are names
    (``SYNTHETIC = {"preferences": planted_preferences, ...}``): key -> the name it maps to."""
    tree = module_tree(module)
    for node in tree.body if tree is not None else []:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(value, ast.Dict) and any(isinstance(t, ast.Name) and t.id == name for t in targets):
            out = {}
            for key, item in zip(value.keys, value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(item, ast.Name):
                    out[key.value] = item.id
            return out
    return None


def dataclass_fields(module: str, name: str) -> dict[str, tuple[ast.expr, bool]] | None:
    """The fields of the dataclass ``name`` as seen from ``module``, its bases' first (bases of the
    same module): field -> (annotation, whether it has a default); ``None`` if not found."""
    found = class_definition(module, name)
    if found is None:
        return None
    where, node = found
    out: dict[str, tuple[ast.expr, bool]] = {}
    for base in node.bases:
        if isinstance(base, ast.Name) and (inherited := dataclass_fields(where, base.id)):
            out.update(inherited)
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            out[item.target.id] = (item.annotation, item.value is not None)
    return out


def dataclass_defaults(module: str, name: str) -> dict[str, Any]:
    """The literal defaults of the dataclass ``name``'s fields as seen from ``module`` (its bases' first,
    as :func:`dataclass_fields`): ``LoraSettings``' ``r`` is 8, read without importing it."""
    found = class_definition(module, name)
    if found is None:
        return {}
    where, node = found
    out: dict[str, Any] = {}
    for base in node.bases:
        if isinstance(base, ast.Name):
            out.update(dataclass_defaults(where, base.id))
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
            try:
                out[item.target.id] = ast.literal_eval(item.value)
            except ValueError:
                out.pop(item.target.id, None)
    return out


def own_signature(package: str, class_path: str) -> Annotated | None:
    """The parameters ``class_path``'s own ``__init__`` names, with their annotations (its ``**kwargs``
    not followed: :mod:`lightning_fed.lightning_init_args` says where a Lightning logger's go), or
    ``None`` if it has no ``__init__`` of its own or cannot be read here."""
    found = located(package, class_path)
    if found is None:
        return None
    where, node = found
    init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        return None
    args = init.args
    return {a.arg: (a.annotation, where) for a in [*args.posonlyargs, *args.args, *args.kwonlyargs][1:]}


def init_defaults(package: str, class_path: str) -> dict[str, Any]:
    """The literal defaults of a class's ``__init__`` keyword parameters (its bases' under its own)."""
    out: dict[str, Any] = {}
    for _, node in reversed(list(class_chain(package, class_path))):
        init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is None:
            continue
        args = init.args.posonlyargs + init.args.args
        pairs = list(zip(args[len(args) - len(init.args.defaults) :], init.args.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults, strict=True) if d is not None]
        for arg, default in pairs:
            try:
                out[arg.arg] = ast.literal_eval(default)
            except ValueError:
                out.pop(arg.arg, None)
    return out
