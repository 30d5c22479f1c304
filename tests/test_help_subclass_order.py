"""``--help`` lists an option's known subclasses by class path, whatever order they were imported in
(issue 42 item 5): ``ruff`` reordering an ``import`` used to change the stored help pages."""

from __future__ import annotations

import importlib
import textwrap

from lightning_fed.federated_cli import FederatedArgumentParser


def _help_with_subclasses_defined(tmp_path, monkeypatch, package: str, order: list[str]) -> str:
    """``--help`` of a parser with one option typed ``Hook``, its subclasses defined (and so
    imported) in ``order``, one module each, imported one after another."""
    root = tmp_path / package
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("class Hook:\n    pass\n")
    for name in order:
        (root / f"{name.lower()}.py").write_text(
            textwrap.dedent(f"""
                from {package} import Hook

                class {name}(Hook):
                    pass
            """)
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    base = importlib.import_module(package).Hook
    for name in order:
        importlib.import_module(f"{package}.{name.lower()}")
    parser = FederatedArgumentParser(prog="lightning-fed fit", exit_on_error=False)
    parser.add_argument("--hook", type=base, help="A hook.")
    return parser.format_help().replace(package, "pkg")


def test_known_subclasses_are_listed_by_name_whatever_the_import_order(tmp_path, monkeypatch):
    first = _help_with_subclasses_defined(tmp_path / "a", monkeypatch, "hooks_a", ["Zeta", "Alpha", "Mid"])
    second = _help_with_subclasses_defined(tmp_path / "b", monkeypatch, "hooks_b", ["Mid", "Zeta", "Alpha"])
    assert first == second
    listed = " ".join(first.split()).split("known subclasses: ")[1].split(")")[0]
    assert listed == "pkg.Hook, pkg.alpha.Alpha, pkg.mid.Mid, pkg.zeta.Zeta"
