"""Generic code asks a hook what it contributes, never which class it is.

What a hook adds to privacy accounting (:meth:`RoundHook.privacy_channels`) or which Flower
train-round path it asks for (:meth:`RoundHook.server_path`) is a method of the hook. So no
module outside a concrete hook's own module tests ``isinstance(x, <ConcreteHook>)`` (or
``issubclass``), and ``privacy/`` imports no module of ``round_hooks/`` or ``selection/`` nor
any module that defines a concrete hook: a new hook that sends something needs no edit there.

Every module is read with ``ast`` (nothing is imported). A concrete hook is a class of the
package that derives, directly or through other classes of the package, from ``RoundHook``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lightning_fed

ROOT = Path(lightning_fed.__file__).parent


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(path.read_text(), str(path))
    return out


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def concrete_hooks(modules: dict[str, ast.Module]) -> dict[str, str]:
    """``{class name: defining module}`` of every subclass of ``RoundHook`` in the package."""
    classes: dict[str, tuple[str, set[str]]] = {}
    for name, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = (name, {b for b in map(_base_name, node.bases) if b})
    hooks: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for cls, (module, bases) in classes.items():
            if cls not in hooks and bases & ({"RoundHook"} | set(hooks)):
                hooks[cls] = module
                changed = True
    return hooks


def isinstance_checks(tree: ast.Module) -> list[tuple[int, str]]:
    """``(line, class name)`` of every ``isinstance``/``issubclass`` second argument in ``tree``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _base_name(node.func) in ("isinstance", "issubclass") and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            out.extend((node.lineno, n) for n in map(_base_name, kinds) if n)
    return out


def _imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_the_scan_finds_the_concrete_hooks_and_an_isinstance_of_one():
    """The checks below can fail: the scan sees the known hooks and an ``isinstance`` of one."""
    modules = _modules()
    hooks = concrete_hooks(modules)
    assert hooks["ClientGrouping"] == "lightning_fed.round_hooks.client_grouping"
    assert hooks["HierarchicalDataSelection"] == "lightning_fed.selection.hds"  # through CoresetSelection
    assert hooks["AsyncArrivals"] == "lightning_fed.heterogeneity.async_rounds"
    assert "RoundHook" not in hooks
    probe = ast.parse("def f(h):\n    return isinstance(h, (int, ClientGrouping)) or issubclass(h, m.AsyncArrivals)\n")
    assert isinstance_checks(probe) == [(2, "int"), (2, "ClientGrouping"), (2, "AsyncArrivals")]


def test_no_isinstance_of_a_concrete_hook_outside_its_module():
    modules = _modules()
    hooks = concrete_hooks(modules)
    found = [
        f"{module}:{line} isinstance of {cls} (defined in {hooks[cls]})"
        for module, tree in modules.items()
        for line, cls in isinstance_checks(tree)
        if cls in hooks and hooks[cls] != module
    ]
    assert found == [], "ask the hook (a RoundHook method) instead:\n" + "\n".join(found)


def test_privacy_imports_no_hook_module():
    modules = _modules()
    hook_modules = set(concrete_hooks(modules).values())
    forbidden = {
        m for m in modules if m.startswith(("lightning_fed.round_hooks", "lightning_fed.selection"))
    } | hook_modules
    found = [
        f"{module} imports {target}"
        for module, tree in modules.items()
        if module.startswith("lightning_fed.privacy")
        for target in sorted(_imported(tree) & forbidden)
    ]
    assert found == [], "\n".join(found)
