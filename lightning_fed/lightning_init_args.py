"""The ``init_args`` of Lightning's own callbacks and loggers (``trainer.callbacks``,
``trainer.logger``): their names and the types of their values, read from Lightning's source
without importing it (which imports torch), and the values the callbacks' constructors refuse
(:mod:`lightning_fed.lightning_refused_values`).

The live parser reported these after 10 s of imports: a key a logger does not take as
``Option 'save_dirr' is not accepted`` (no closest), a word for a number as ``Expected a <class
'int'>. Got value: lots`` (no option's full name), a refused value as exit 1
``MisconfigurationException``. Here a key is refused with the closest, a value of no type its
annotation has (``int``, ``float``, ``bool``, ``str``, ``None``, ``Optional``, ``Union``,
``Literal`` of strings; any other annotation is not checked) with what it takes
(:func:`~lightning_fed.value_rules.plain_value_problem`, as ``trainer.*``'s), in one line naming
``trainer.callbacks[0].<key>``.

A class whose ``__init__`` takes ``**kwargs`` is left to the live parser unless it is known where
they go: ``TensorBoardLogger`` hands them to the ``SummaryWriter`` (``lightning.fabric.loggers.
tensorboard``: ``SummaryWriter(log_dir=..., **self._kwargs)``, torch's when ``tensorboard`` is
installed, else tensorboardX's), whose parameters are read from its source as jsonargparse follows
them. The other loggers' ``**kwargs`` (``WandbLogger``'s go to ``wandb.init``, ``CometLogger``'s
to comet's config, ``NeptuneLogger``'s to ``neptune.init_run``) are libraries' own, not read here:
those loggers' keys are left to the live parser. ``tests/test_lightning_init_args.py`` compares
what is read here with jsonargparse's own reading of each class.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Collection
from importlib import metadata
from pathlib import Path
from typing import Any

from lightning_fed.class_parameters import Annotated, own_signature, signature, takes_any_keyword
from lightning_fed.lightning_refused_values import refused_value
from lightning_fed.value_rules import plain_value_problem, unknown_key

PACKAGES = {"callbacks": "lightning.pytorch.callbacks", "logger": "lightning.pytorch.loggers"}
"""The Lightning subpackage whose classes each ``trainer.<option>`` takes by short name."""
PLAIN = ("int", "float", "bool", "str")


def _installed(distribution: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def summary_writer_parameters() -> Annotated | None:
    """The parameters of the ``SummaryWriter`` Lightning's ``TensorBoardLogger`` builds (besides
    ``log_dir``, which it sets), read from the installed file (found from the distributions'
    metadata: nothing imported), or ``None`` if not read or it takes ``**kwargs`` itself."""
    if _installed("tensorboard") is not None:  # Lightning's `_TENSORBOARD_AVAILABLE`: torch's writer
        owner, file = _installed("torch"), "torch/utils/tensorboard/writer.py"
    else:
        owner, file = _installed("tensorboardX"), "tensorboardX/writer.py"
    if owner is None:
        return None
    try:
        tree = ast.parse(Path(str(owner.locate_file(file))).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "SummaryWriter":
            init = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
            if init is None or init.args.kwarg is not None or init.args.vararg is not None:
                return None
            args = [*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs][1:]
            return {a.arg: (a.annotation, file) for a in args if a.arg != "log_dir"}
    return None


KWARGS_GO_TO: dict[str, Callable[[], Annotated | None]] = {"TensorBoardLogger": summary_writer_parameters}
"""Lightning's class (short name) whose ``**kwargs`` go to a known callable -> that callable's parameters."""


def accepted(option: str, class_path: str, exported: Collection[str]) -> Annotated | None:
    """The ``init_args`` Lightning's class ``class_path`` (a short name among the ``exported`` names
    of its subpackage, or a ``lightning.`` path) of ``trainer.<option>`` takes, with their
    annotations; ``None`` if it is not Lightning's or they cannot be known here (the live parser
    decides)."""
    if "." not in class_path and class_path not in exported:
        return None  # the package's own or a plugin's, by short name
    if "." in class_path and class_path.split(".")[0] != "lightning":
        return None  # a user's own class
    package = PACKAGES[option]
    if not takes_any_keyword(package, class_path):
        return signature(package, class_path)
    more = KWARGS_GO_TO.get(class_path.rpartition(".")[2])
    own = own_signature(package, class_path)
    extra = more() if more is not None else None
    return None if own is None or extra is None else {**extra, **own}


def kinds(annotation: ast.expr | None) -> tuple[str, ...] | None:
    """``annotation`` as :func:`~lightning_fed.value_rules.plain_value_problem`'s kinds (``("int",
    "null")`` for ``Optional[int]``, ``("'step'", "'epoch'")`` for a ``Literal``), or ``None`` if it
    names anything else (a path, a ``timedelta``, a callable: not checked here)."""
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return ("null",)
    if isinstance(annotation, ast.Name):
        return ("null",) if annotation.id == "None" else ((annotation.id,) if annotation.id in PLAIN else None)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        left, right = kinds(annotation.left), kinds(annotation.right)
        return None if left is None or right is None else left + right
    if not isinstance(annotation, ast.Subscript):
        return None
    head = annotation.value
    name = head.id if isinstance(head, ast.Name) else head.attr if isinstance(head, ast.Attribute) else None
    items = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
    if name == "Literal":
        if not all(isinstance(i, ast.Constant) and (i.value is None or isinstance(i.value, str)) for i in items):
            return None
        return tuple("null" if i.value is None else repr(i.value) for i in items)  # type: ignore[union-attr]
    if name not in ("Optional", "Union"):
        return None
    parts = [kinds(i) for i in items]
    if any(p is None for p in parts):
        return None
    found = tuple(k for p in parts for k in p)  # type: ignore[union-attr]
    return (*found, "null") if name == "Optional" else found


def init_args_problem(option: str, key: str, value: Any, exported: Collection[str]) -> str | None:
    """The line refusing an ``init_args`` key or value of Lightning's callback or logger ``value``
    (``{class_path: EarlyStopping, init_args: {...}}``) given to ``trainer.<option>`` (``key``:
    ``trainer.callbacks[0]``, ``trainer.logger``; ``exported``: the short names Lightning's
    subpackage exports, :func:`~lightning_fed.trainer_classes.lightning_exports`), or ``None``."""
    class_path = value.get("class_path") if isinstance(value, dict) else None
    init_args = value.get("init_args") if isinstance(value, dict) else None
    if not isinstance(class_path, str) or not isinstance(init_args, dict):
        return None
    params = accepted(option, class_path.strip(), exported)
    if params is None:
        return None
    short = class_path.strip().rpartition(".")[2]
    for name in init_args:
        if str(name) not in params:
            return unknown_key(key, short, str(name), list(params))
    for name, given in init_args.items():
        wanted = kinds(params[str(name)][0])
        if wanted is not None and (problem := plain_value_problem(f"{key}.{name}", wanted, given)):
            return problem
    return refused_value(key, short, init_args) if option == "callbacks" else None
