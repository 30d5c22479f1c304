"""``model.loss_options``: the keyword arguments the chosen DPO loss takes, read from source (no torch).

:func:`~lightning_fed.modules.dpo_losses.find_dpo_loss` refuses a key the loss does not take
(``loss_options: {zz: 1}`` for ``sigmoid``) after 13 s of imports; the precheck
(:func:`loss_options_problem`, from :mod:`lightning_fed.config_values`) reads the registered
losses' signatures from :mod:`lightning_fed.modules.dpo_losses`' source (``@dpo_loss_function("name")``,
the keywords after the four log-probs and ``beta``) and refuses it with the same line
(:func:`loss_options_line`, which both use). A loss given as a dotted path is left to the class.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

from lightning_fed.class_locations import module_tree
from lightning_fed.class_parameters import class_chain, init_defaults
from lightning_fed.option_rules import PACKAGES

LOSSES = ("lightning_fed.modules.dpo_losses", "dpo_loss_function")
"""The module the losses are registered in, and the decorator that registers them."""
LEADING = 5
"""The parameters every loss takes first: the four log-probs and ``beta``."""
TAKES_LOSS = "DPOModule"
"""The package's module class (and its subclasses) that takes ``loss`` and ``loss_options``."""


def loss_options_line(name: str, known: Iterable[str], unknown: Iterable[str]) -> str:
    """The one line refusing ``unknown`` keys of ``model.loss_options`` for the loss ``name``."""
    return f"model.loss_options: {name!r} takes {sorted(known)}, got {sorted(unknown)}"


def loss_keywords(name: str) -> list[str] | None:
    """The keyword options of the registered loss ``name``, or ``None`` if not found here."""
    tree = module_tree(LOSSES[0])
    for node in tree.body if tree is not None else []:
        if not isinstance(node, ast.FunctionDef):
            continue
        for d in node.decorator_list:
            if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == LOSSES[1] and d.args:
                if isinstance(d.args[0], ast.Constant) and d.args[0].value == name:
                    args = [*node.args.posonlyargs, *node.args.args][LEADING:] + node.args.kwonlyargs
                    return [a.arg for a in args]
    return None


def loss_options_problem(model: Any) -> str | None:
    """The line refusing the merged ``model:``'s ``loss_options`` for its ``loss``, or ``None``."""
    if not isinstance(model, dict) or not isinstance(options := model.get("init_args", {}).get("loss_options"), dict):
        return None
    if not any(node.name == TAKES_LOSS for _, node in class_chain(PACKAGES["model"], model["class_path"])):
        return None
    name = model["init_args"].get("loss", init_defaults(PACKAGES["model"], model["class_path"]).get("loss"))
    if not isinstance(name, str) or "." in name or (known := loss_keywords(name)) is None:
        return None
    unknown = [str(key) for key in options if str(key) not in known]
    return loss_options_line(name, known, unknown) if unknown else None
