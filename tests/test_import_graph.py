"""No import circle anywhere in ``lightning_fed``.

Every module of the package is read with ``ast`` (nothing is imported). Every import counts:
at module level, inside functions, and under ``if TYPE_CHECKING:`` (a type-only circle is
still two modules that each need the other to be understood).

Edges follow what Python executes. ``import a.b.c`` / ``from a.b.c import x`` from module
``m`` gives an edge ``m -> a.b.c`` (or ``m -> a.b.c.x`` when ``x`` is itself a submodule),
plus an edge to every package ``__init__`` on the way (``a.b``) that does not contain
``m``: importing a submodule runs its packages' ``__init__`` first, so their re-exports
count. A package's ``__init__`` is NOT an edge for its own modules: ``a.b.d`` importing
``a.b.c`` runs ``a/b/__init__`` only if it is not already running, and a package that
re-exports its own submodules (``a/b/__init__`` importing ``a.b.d``) is the normal layout,
not a circle. ``from . import`` forms are resolved the same way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lightning_fed

ROOT = Path(lightning_fed.__file__).parent
PACKAGE = "lightning_fed"


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if _is_package(path) else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Modules of the package that ``module`` imports (see the module docstring)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path, node)
            names.add(target)
            names.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules)
    own_package = module if _is_package(path) else module.rsplit(".", 1)[0]
    out = set()
    for name in names:
        if not name.startswith(PACKAGE):
            continue
        parts = name.split(".")
        for i in range(2, len(parts) + 1):  # the module itself and the packages on the way
            prefix = ".".join(parts[:i])
            if prefix not in modules or prefix == module:
                continue
            is_ancestor_pkg = i < len(parts) or _is_package(modules[prefix])
            if is_ancestor_pkg and (own_package == prefix or own_package.startswith(prefix + ".")):
                continue  # our own package's __init__: not an edge
            out.add(prefix)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _targets(m, p, modules) for m, p in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph`` as ``[a, b, ..., a]``, or ``None``."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_sees_function_level_and_type_checking_imports():
    graph = import_graph()
    # `modules.pdpo` finds the loop inside a method; `federation.turn` imports the hooks for types only.
    assert "lightning_fed.federation.driver" in graph["lightning_fed.modules.pdpo"]
    assert "lightning_fed.federation.hooks" in graph["lightning_fed.federation.turn"]
    # a package's own __init__ is not an edge of its modules; another package's is
    assert "lightning_fed.federation" not in graph["lightning_fed.federation.turn"]
    assert "lightning_fed.strategies" in graph["lightning_fed.federation.turn"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)
