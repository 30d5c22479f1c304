"""The types the package's own options are annotated with, checked against a config's values
before torch is imported (issue 41: ``federation.isolate_failures: x``, ``data.field_map: {prompt:
5}``, ``model.lora.target_modules: 5`` were the live parser's ``Expected a <class 'bool'>`` after
9-11 s of imports, naming neither the file nor what to write).

One reading serves every section: the annotation as the source writes it (``ast``, read by
:mod:`lightning_fed.class_parameters`: the ``__init__`` of the package's ``model:`` / ``data:``
classes, strategies and round hooks, the fields of
:class:`~lightning_fed.run_config.FederationConfig`), and :func:`type_problem` for one value:
``int``, ``float``, ``bool``, ``str``, a ``dict`` (``dict[str, str]``: each value a string), a list
(``list[str]``, ``Sequence[int]``...: each item of that type) and a ``Literal`` (its choices), each
``| None`` too. Only what the parser certainly refuses is refused; an annotation not read here
(a class, a union of others) is left to it. An option with a value rule
(:mod:`lightning_fed.option_rules`) is checked by its rule instead, with the class's own line.

Imports nothing heavy: :mod:`lightning_fed.class_parameters` and :mod:`lightning_fed.value_rules`.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from lightning_fed.class_kinds import package_class
from lightning_fed.class_parameters import fields, signature
from lightning_fed.federation_rules import FEDERATION_MORE
from lightning_fed.option_rules import FEDERATION_ALL, PACKAGES, class_rules
from lightning_fed.value_rules import word_fits

PLAIN = ("int", "float", "bool", "str")
LISTS = ("list", "Sequence", "tuple")
DICTS = ("dict", "Mapping")
FEDERATION_CONFIG = ("lightning_fed.run_config", "FederationConfig")
"""Where the ``federation:`` section's dataclass is defined (its fields are read from the source)."""
_WANTED = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}
_PLURAL = {"int": "integers", "float": "numbers", "bool": "booleans", "str": "strings"}


def _strip_none(node: ast.expr) -> tuple[ast.expr | None, bool]:
    """``(the annotation without `| None`, whether it had it)``; ``None`` for a union of more."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = [node.left, node.right]
        nones = [s for s in sides if isinstance(s, ast.Constant) and s.value is None]
        if len(nones) == 1:
            rest = next(s for s in sides if s is not nones[0])
            inner, _ = _strip_none(rest)
            return inner, True
        return None, False
    return node, False


def kind(annotation: ast.expr | None) -> tuple[str | None, Any, bool]:
    """``(kind, detail, optional)`` of an annotation: ``int`` / ``float`` / ``bool`` / ``str``;
    ``dict`` (detail: the values' kind, ``None`` if any); ``list`` (detail: the items' kind);
    ``literal`` (detail: the choices); ``None`` if not read here."""
    if annotation is None:
        return None, None, False
    node, optional = _strip_none(annotation)
    if node is None:
        return None, None, False
    if isinstance(node, ast.Name):
        name = node.id
        return (name if name in PLAIN else "dict" if name in DICTS else None), None, optional
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        outer = node.value.id
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if outer == "Literal" and all(isinstance(a, ast.Constant) for a in args):
            return "literal", tuple(a.value for a in args), optional  # type: ignore[union-attr]
        texts = [ast.unparse(a) for a in args]
        if outer in DICTS and len(texts) == 2:
            return "dict", texts[1] if texts[1] in PLAIN else None, optional
        if outer in LISTS and texts[0] in PLAIN and (outer != "tuple" or texts[1:] in ([], ["..."])):
            return "list", texts[0], optional
    return None, None, optional


def _plain_fits(kind_: str, value: Any) -> bool:
    if kind_ == "bool":
        return isinstance(value, bool)
    if kind_ == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind_ == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


def type_problem(option: str, annotation: ast.expr | None, value: Any, as_text: bool = False) -> str | None:
    """The line refusing ``value`` for an option annotated ``annotation`` where the parser certainly
    refuses it, or ``None``. A number option takes any number (the rules check ranges) and a word
    the parser reads as one (``"5"``, ``"on"``); a ``str`` option given on the command line
    (``as_text``) is its text; a string for a mapping or a list may still be read by the parser
    (a file, JSON), so it is not refused."""
    found, detail, optional = kind(annotation)
    null = " or null" if optional else ""
    if found == "str" and value is None and not optional and not as_text:
        return f"{option} must be a string, got None"  # the code reads it as text: an AttributeError later
    if found is None or value is None:
        return None
    if found == "literal":
        if value in detail or (as_text and str(value) in map(str, detail)):
            return None
        return f"{option} must be one of {list(detail)}{null}, got {value!r}"
    if found == "dict":
        if isinstance(value, str):
            return None
        if not isinstance(value, Mapping):
            return f"{option} must be a mapping{null}, got {value!r}"
        for key, item in value.items():
            if detail is not None and not _plain_fits(detail, item):
                return f"{option}.{key} must be {_WANTED[detail]}, got {item!r}"
        return None
    if found == "list":
        if isinstance(value, str):
            return None
        if not isinstance(value, (list, tuple)):
            return f"{option} must be a list of {_PLURAL[detail]}{null}, got {value!r}"
        for i, item in enumerate(value):
            if not _plain_fits(detail, item):
                return f"{option}[{i}] must be {_WANTED[detail]}, got {item!r}"
        return None
    if found == "str":
        if as_text or isinstance(value, str):
            return None
        return f"{option} must be a string{null}, got {value!r}"
    if isinstance(value, (int, float)):  # a bool for a number, a number for a bool: left to the parser
        return None
    if isinstance(value, str) and word_fits((found,), value.strip()):
        return None
    return f"{option} must be {_WANTED[found]}{null}, got {value!r}"


def takes_text(package: str, class_path: str, option: str) -> bool:
    """Whether the package's class ``class_path`` annotates ``option`` ``str`` (or ``str | None``): the
    parser keeps an empty ``--option=`` as ``''`` there, where YAML reads ``None`` (red team 12 row 5:
    ``--federation.hooks.anchors=`` reached the class as ``''`` while the precheck saw ``None``)."""
    annotated = signature(package, class_path)
    return annotated is not None and option in annotated and kind(annotated[option][0])[0] == "str"


def options_type_problem(
    option: str,
    annotated: Mapping[str, tuple[ast.expr | None, str]],
    values: Mapping[str, Any],
    ruled: set[str] | frozenset[str] = frozenset(),
    as_text: set[str] | frozenset[str] = frozenset(),
) -> str | None:
    """The first value of ``values`` (the options of ``option``: ``federation``,
    ``federation.strategy``...) of the wrong type for its annotation; ``ruled``: options with a
    value rule (checked by it), ``as_text``: the dotted options given on the command line."""
    for key, value in values.items():
        if str(key) in ruled or str(key) not in annotated:
            continue
        name = f"{option}.{key}"
        if problem := type_problem(name, annotated[str(key)][0], value, name in as_text):
            return problem
    return None


def federation_type_problem(federation: Mapping[str, Any], ruled: set[str], as_text: set[str]) -> str | None:
    """``federation:``'s own options against :class:`~lightning_fed.run_config.FederationConfig`'s fields."""
    found = fields(*FEDERATION_CONFIG)
    if found is None:
        return None
    return options_type_problem("federation", found, federation, ruled, as_text)


def class_type_problem(
    package: str, section: Any, key: str, ruled: set[str], as_text: set[str] | frozenset[str] = frozenset()
) -> str | None:
    """A strategy's or round hook's option (``section``: ``{"class_path", "init_args"}``) of the
    wrong type for its ``__init__``'s annotation; ``key`` names it (``federation.hooks[0]``)."""
    if not isinstance(section, dict) or not isinstance(section.get("init_args"), dict):
        return None
    annotated = signature(package, section["class_path"])
    if annotated is None:
        return None
    return options_type_problem(key, annotated, section["init_args"], ruled, as_text)


def sections_type_problem(sections: Mapping[str, Any], as_text: set[str]) -> str | None:
    """The first option of ``federation:``, its strategy or a round hook of the wrong type
    (``sections``: :attr:`lightning_fed.config_values.Merged.sections`), or ``None``."""
    federation = sections.get("federation")
    ruled = {rule.name for rule in FEDERATION_ALL + FEDERATION_MORE}
    if isinstance(federation, Mapping) and (problem := federation_type_problem(federation, ruled, as_text)):
        return problem
    hooks = sections.get("federation.hooks")
    items = [("federation.strategy", sections.get("federation.strategy"), "federation.strategy")]
    items += [
        ("federation.hooks", h, f"federation.hooks[{i}]")
        for i, h in enumerate(hooks if isinstance(hooks, list) else [])
    ]
    for section, value, key in items:
        if not isinstance(value, dict) or not package_class(section, value["class_path"]):
            continue  # a user's class: the live parser decides
        rules = class_rules(section, value["class_path"]) or ()
        if problem := class_type_problem(PACKAGES[section], value, key, {r.name for r in rules}, as_text):
            return problem
    return None
