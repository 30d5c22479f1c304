"""Each run option is declared once and read from the run object everywhere (issue 42 item 2).

The package is walked with ``ast`` for the three shapes a second copy of an option takes:

- a *forwarding property*: a ``@property`` named after the option, or ``name = property(...)``
  (``FederatedLoop.local_steps`` read ``self.config.local_steps``);
- a *class-level declaration* outside the run object: a class body's ``local_steps: ... = ...``
  (``TurnDriver.local_steps = None`` stood in for the config);
- an *attribute copy*: ``obj.local_steps = local_steps`` or ``... = run.local_steps`` (also as
  one element of a tuple assignment; ``self.rounds, self.local_steps = turn.rounds, local_steps``).

Only :class:`~lightning_fed.run_config.FederationConfig` and :class:`~lightning_fed.run.FederatedRun`
declare them. :data:`OWN_OPTIONS` lists the other classes that still declare one of the names
with why; the list may only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lightning_fed"
OPTIONS = ("local_steps", "privacy", "batch_clients", "compression")
RUN_OBJECT = {("run_config.py", "FederationConfig"), ("run.py", "FederatedRun")}

OWN_OPTIONS = {
    ("heterogeneity/system_profiles.py", "SystemProfile", "local_steps"): (
        "the system-heterogeneity hook's own key (steps a full turn counts on its virtual clock)"
    ),
    ("heterogeneity/virtual_clock.py", "SyncRoundSimulator", "local_steps"): "SystemProfile.local_steps, its clock's",
    ("heterogeneity/virtual_clock.py", "AsyncRoundSimulator", "local_steps"): "AsyncRounds' SystemProfile.local_steps",
}
"""Classes with a field of an option's name that is not the run's option, each with why."""


def _names(node: ast.AST) -> set[str]:
    """The option names a value reads directly: ``local_steps`` or ``x.local_steps``."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return set()


def _copies(target: ast.AST, value: ast.AST) -> list[str]:
    """The options an assignment copies into an attribute (pairwise for tuples)."""
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        return [name for t, v in zip(target.elts, value.elts) for name in _copies(t, v)]
    if isinstance(target, ast.Attribute) and target.attr in OPTIONS and target.attr in _names(value):
        return [target.attr]
    return []


def _is_property(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "property"


def mirrors(root: Path = PACKAGE) -> list[tuple[str, str, str, str]]:
    """(file, class or "", option, what) for every second copy of an option under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
            for stmt in cls.body:
                if isinstance(stmt, ast.FunctionDef) and stmt.name in OPTIONS:
                    if any(isinstance(d, ast.Name) and d.id == "property" for d in stmt.decorator_list):
                        found.append((rel, cls.name, stmt.name, "forwarding property"))
                targets = (
                    [stmt.target]
                    if isinstance(stmt, ast.AnnAssign)
                    else stmt.targets
                    if isinstance(stmt, ast.Assign)
                    else []
                )
                for t in targets:
                    if isinstance(t, ast.Name) and t.id in OPTIONS:
                        if stmt.value is not None and _is_property(stmt.value):
                            found.append((rel, cls.name, t.id, "forwarding property"))
                        elif (rel, cls.name) not in RUN_OBJECT and (rel, cls.name, t.id) not in OWN_OPTIONS:
                            found.append((rel, cls.name, t.id, "class-level declaration"))
        owner = {id(n): c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in ast.walk(c)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                cls = owner.get(id(node), "")
                for t in node.targets:
                    for name in _copies(t, node.value):
                        if (rel, cls, name) not in OWN_OPTIONS:
                            found.append((rel, cls, name, "attribute copy"))
    return found


def test_each_option_is_declared_once_and_never_mirrored():
    assert mirrors() == []


def test_the_walk_finds_each_shape_of_mirror(tmp_path):
    (tmp_path / "loop.py").write_text(
        "class Loop:\n"
        "    compression = property(lambda self: self.run.compression)\n"
        "    local_steps: int | None = None\n"
        "    @property\n"
        "    def privacy(self):\n"
        "        return self.run.privacy\n"
        "    def __init__(self, run, batch_clients):\n"
        "        self.rounds, self.local_steps = run.rounds, run.local_steps\n"
        "        self.batch_clients = batch_clients\n"
        "        self.privacy = None  # a value of its own, not a copy\n"
    )
    assert sorted(mirrors(tmp_path)) == [
        ("loop.py", "Loop", "batch_clients", "attribute copy"),
        ("loop.py", "Loop", "compression", "forwarding property"),
        ("loop.py", "Loop", "local_steps", "attribute copy"),
        ("loop.py", "Loop", "local_steps", "class-level declaration"),
        ("loop.py", "Loop", "privacy", "forwarding property"),
    ]


def test_the_exceptions_still_exist():
    """An exception whose class no longer declares the name is dropped from :data:`OWN_OPTIONS`."""
    for rel, cls, name in OWN_OPTIONS:
        tree = ast.parse((PACKAGE / rel).read_text())
        (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls]
        source = ast.unparse(node)
        assert f"{name}:" in source or f"self.{name}" in source, (rel, cls, name)
