"""A later config's value merged over an earlier one's as jsonargparse merges them (``fit --config
a.yaml --config b.yaml``), read from the classes' source without importing them.

What the parser replaces and what it merges depends on the parameter's annotation
(:func:`lightning_fed.class_parameters.signature`; checked with ``--print_config``,
``tests/test_config_merging_cli.py``):

- a class (``{class_path, init_args}``: a section, a wrapper's ``strategy``, a round hook) over
  the same class: its ``init_args`` merged option by option, each as below; over another class:
  the earlier options the new class takes are kept, the others dropped (jsonargparse's
  ``discard_init_args_on_class_path_change``); ``{init_args: ...}`` alone keeps the class;
- an option typed by a dataclass (``model.backbone``: ``BackboneConfig``, ``model.lora``):
  merged field by field, each as below;
- a list of classes (``federation.hooks``) over one of the same length: item by item; of
  another length: replaced;
- anything else (``dict``, ``Mapping``, ``Any``, a list, a number: ``model.backbone.config``,
  ``data.synthetic_args``, a hook's ``anchor_args``): replaced whole.

A class whose source is not read here (a user's own) keeps its ``init_args`` merged option by
option, each replaced.
"""

from __future__ import annotations

import ast
from typing import Any

from lightning_fed.class_parameters import Annotated, fields, signature

CLASS_KEYS = ("class_path", "init_args", "dict_kwargs")
"""The keys of a class-valued value itself (jsonargparse's), not of its class."""


def is_class(value: Any) -> bool:
    """Whether ``value`` is ``{class_path: <str>, ...}``."""
    return isinstance(value, dict) and isinstance(value.get("class_path"), str)


def _options(package: str, class_path: str) -> Annotated | None:
    """``class_path``'s parameters (a short name seen from ``package``, or a dotted path), or ``None``."""
    return signature(package, class_path)


def same_class(package: str, a: str, b: str) -> bool:
    """``FedProx`` and ``lightning_fed.strategies.FedProx`` are one class (jsonargparse resolves both)."""
    if a == b:
        return True
    known = _options(package, a) is not None and _options(package, b) is not None
    return known and a.rpartition(".")[2] == b.rpartition(".")[2]


def _dataclass(annotation: ast.expr | None, where: str) -> Annotated | None:
    """The fields of the one dataclass an annotation names (``BackboneConfig``, ``LoraSettings | None``),
    or ``None`` (a ``dict``, ``Any``, a union of classes, an annotation not read)."""
    if annotation is None:
        return None
    names = {
        node.id
        for node in ast.walk(annotation)
        if isinstance(node, ast.Name) and node.id not in ("None", "Optional", "Union")
    }
    if len(names) != 1:
        return None
    return fields(where, names.pop())


def merge_value(annotation: ast.expr | None, where: str, package: str, old: Any, new: Any) -> Any:
    """``new`` given over ``old`` for an option annotated ``annotation`` (written in module ``where``;
    a class named in it looked up from ``package``)."""
    if is_class(old) and isinstance(new, str) and not new.endswith((".yaml", ".yml", ".json")):
        new = {"class_path": new}  # `strategy: FedProx`: a class named alone
    if is_class(old) and (is_class(new) or _init_args_only(new)):
        return merge_class(package, old, new)
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and all(map(is_class, new)):
        return [merge_value(annotation, where, package, o, n) for o, n in zip(old, new, strict=True)]
    if isinstance(old, dict) and isinstance(new, dict) and (found := _dataclass(annotation, where)) is not None:
        return merge_options(found, package, old, new)
    return new


def merge_options(options: Annotated | None, package: str, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A class's (or a dataclass's) options ``new`` over ``old``, each by its annotation in ``options``."""
    out = dict(old)
    for key, value in new.items():
        if key in out:
            annotation, where = (options or {}).get(key, (None, package))
            out[key] = merge_value(annotation, where, package, out[key], value)
        else:
            out[key] = value
    return out


def _init_args_only(value: Any) -> bool:
    """``{init_args: {...}}`` alone: the earlier class's options given again."""
    return isinstance(value, dict) and set(value) == {"init_args"} and isinstance(value["init_args"], dict)


def merge_class(package: str, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The class ``new`` (``{class_path, init_args}``, or ``{init_args}`` alone) given over ``old``."""
    new = {"class_path": old["class_path"], **new}
    old_args = old.get("init_args") if isinstance(old.get("init_args"), dict) else {}
    new_args = new.get("init_args") if isinstance(new.get("init_args"), dict) else {}
    options = _options(package, new["class_path"])
    if not same_class(package, old["class_path"], new["class_path"]):
        old_args = {k: v for k, v in old_args.items() if options is not None and k in options}
        old = {"class_path": new["class_path"]}
    out = {**old, **new, "init_args": merge_options(options, package, old_args, new_args)}
    return out
