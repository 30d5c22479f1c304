"""Every option of the package's classes and of ``federation:`` whose annotation is a plain type,
a list or mapping of one, or a ``Literal`` gets its type checked before torch (issue 41): a table
over all of them, read from the source as the precheck reads them (:mod:`lightning_fed.option_types`),
each given a value of another type, must be refused in a line naming that option. The CLI cases
(the outside tester's) are in tests/test_class_kinds_cli.py."""

from __future__ import annotations

import ast

import pytest

from lightning_fed.class_kinds import KINDS
from lightning_fed.class_parameters import fields, signature
from lightning_fed.class_paths import package_subclasses
from lightning_fed.option_rules import PACKAGES, SECTIONS, class_rules
from lightning_fed.option_types import FEDERATION_CONFIG, kind, type_problem

WRONG = {"int": ["x", [1], {"a": 1}], "float": ["x", [1.0]], "bool": ["x", [True]], "str": [[1], {"a": 1}, 5]}


def _options() -> list[tuple[str, ast.expr]]:
    out = []
    for section in ("model", "data", "federation.strategy", "federation.hooks"):
        names = set(SECTIONS[section]) | (set(package_subclasses(KINDS[section][0])) if "." in section else set())
        for name in sorted(names):
            annotated = signature(PACKAGES[section], name) or {}
            ruled = {rule.name for rule in class_rules(section, name) or ()}
            out += [(f"{section}.{name}.{k}", a) for k, (a, _) in annotated.items() if k not in ruled and a is not None]
    out += [(f"federation.{k}", a) for k, (a, _) in (fields(*FEDERATION_CONFIG) or {}).items()]
    return [(option, annotation) for option, annotation in out if kind(annotation)[0] is not None]


OPTIONS = _options()


def test_the_table_holds_every_kind_the_package_annotates():
    kinds = {kind(a)[0] for _, a in OPTIONS}
    assert {"int", "float", "bool", "str", "dict", "list"} <= kinds
    assert len(OPTIONS) > 100


@pytest.mark.parametrize(("option", "annotation"), OPTIONS, ids=[o for o, _ in OPTIONS])
def test_a_value_of_another_type_is_refused_naming_the_option(option, annotation):
    found, detail, optional = kind(annotation)
    if found in WRONG:
        bad = WRONG[found]
    elif found == "list":
        bad = [5, [WRONG[detail][0] if detail != "str" else 5]]
    elif found == "dict":
        bad = [5, [1]] + ([{"k": WRONG[detail][0] if detail != "str" else 5}] if detail else [])
    else:  # literal
        bad = ["not-a-choice"]
    for value in bad:
        line = type_problem(option, annotation, value)
        assert line is not None and line.startswith(option), (option, value)
    if found != "str" or optional:
        assert type_problem(option, annotation, None) is None  # null is the live parser's (or the default)


@pytest.mark.parametrize(
    ("text", "value", "line"),
    [
        ("int", "5", None),
        ("bool", "on", None),
        ("float | None", "1e-3", None),
        ("Literal['a', 'b']", "c", "o must be one of ['a', 'b'], got 'c'"),
        ("Literal['a', 'b'] | None", "a", None),
        ("dict[str, str] | None", {"prompt": 5}, "o.prompt must be a string, got 5"),
        ("dict[str, Any] | None", {"prompt": 5}, None),
        ("list[str] | None", 5, "o must be a list of strings or null, got 5"),
        ("Sequence[int] | None", [1, "x"], "o[1] must be an integer, got 'x'"),
        ("str", 5, "o must be a string, got 5"),
        ("SomeClass | None", 5, None),
    ],
)
def test_type_problem_by_annotation(text, value, line):
    assert type_problem("o", ast.parse(text, mode="eval").body, value) == line


def test_a_string_option_given_on_the_command_line_is_its_text():
    assert type_problem("o", ast.parse("str", mode="eval").body, 5, as_text=True) is None
