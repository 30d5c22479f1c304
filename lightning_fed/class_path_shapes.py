"""The shape of a class-valued section in a config file (``model:``, ``data:``,
``federation.strategy:``, each of ``federation.hooks:`` and ``trainer.callbacks:``): ``class_path``
and ``init_args``.

jsonargparse reads such a section as a class: a ``class_path`` (a class name or a dotted path) and
its ``init_args``. What it says of a wrong shape comes after torch is imported (8-9 s of CPU) and
names no key: ``argument of type 'float' is not iterable`` (``class_path: -0.0``), ``Not a valid
subclass of FederatedModule Subclass types expect one of:`` (``class_pathx:``), or ``Option 'beta'
is not accepted`` (``class_path`` deleted: ``init_args`` alone are read as the base class's,
:data:`BASES`). A number where the class goes (``model: 1e-300``, ``federation.strategy: 5``,
``--data=5``) got ``Not a valid subclass of Strategy Subclass types expect one of:`` and nothing
more; a list where its ``init_args`` go (``init_args: [1, 2]``) ``unknown class_path
'lightning_fed.modules.DPOModule' ('list' object has no attribute 'keys')``, naming the class that
exists; ``federation.hooks: 5`` ``Expected a <class 'list'>``. :func:`section_shape_problem` and
:func:`classes_shape_problem` say these before the imports, naming the key.
"""

from __future__ import annotations

import difflib
from typing import Any

from lightning_fed.class_parameters import parameters
from lightning_fed.option_rules import PACKAGES, SECTIONS

CLASS_KEYS = ("class_path", "init_args", "dict_kwargs")
"""The keys of a class-valued section (jsonargparse's)."""
BASES = {"model": "FederatedModule", "data": "FederatedDataModule"}
"""The class jsonargparse takes when ``init_args`` come without a ``class_path`` (the CLI's base class)."""
EXAMPLES = {
    "model": "lightning_fed.modules.DPOModule",
    "data": "lightning_fed.datamodules.PreferenceDataModule",
    "federation.strategy": "lightning_fed.strategies.FedAvg",
    "federation.hooks": "lightning_fed.round_hooks.ClientGrouping",
    "trainer.callbacks": "lightning.pytorch.callbacks.ModelCheckpoint",
}
"""The class the error shows as an example (the shipped ``tiny`` config's; a shipped hook; a
Lightning callback that needs no option)."""
LISTS = {"federation.hooks": "a list of round hooks", "trainer.callbacks": "a callback or a list of callbacks"}
"""The options that take a list of classes (``trainer.callbacks`` one class as well)."""


def _dotted_name(value: str) -> bool:
    return bool(value) and all(part.isidentifier() for part in value.split("."))


def section_shape_problem(section: str, value: Any, earlier_class: bool, key: str | None = None) -> str | None:
    """The line refusing the shape of ``section``'s value (``model``, ``data``, ``federation.strategy``
    or one class of :data:`LISTS`, ``key`` naming it: ``federation.hooks[0]``) as a config file gives
    it, or ``None``. ``earlier_class``: an earlier file or option already named its class (``init_args``
    alone then apply to that class)."""
    if section not in EXAMPLES:
        return None
    key = key or section
    if value is not None and not isinstance(value, (dict, str)):  # a number, a bool, a list: no class
        return (
            f"{key} must be a class name or a mapping of its class_path and init_args"
            f" (e.g. {key}: {{class_path: {EXAMPLES[section]}}}), got {value!r}"
        )
    if not isinstance(value, dict):
        return None
    for name in value:
        if str(name) not in CLASS_KEYS:
            near = difflib.get_close_matches(str(name), CLASS_KEYS, n=1, cutoff=0.6)
            hint = f"did you mean {key}.{near[0]}?" if near else f"its keys: {', '.join(CLASS_KEYS[:2])}"
            return f"{key}.{name} is not a key of {key}: (a class_path and its init_args); {hint}"
    init_args = value.get("init_args")
    if init_args is not None and not isinstance(init_args, dict):
        return f"{key}.init_args must be a mapping of the class's options, got {init_args!r}"
    if "class_path" in value:
        class_path = value["class_path"]
        if not isinstance(class_path, str) or not _dotted_name(class_path):
            return (
                f"{key}.class_path must be a class name or a dotted class path"
                f" (e.g. {EXAMPLES[section]}), got {class_path!r}"
            )
        return None
    if section not in BASES or earlier_class or not isinstance(init_args, dict):
        return None
    base = BASES[section]
    accepted = parameters(PACKAGES[section], base)
    if accepted is None or all(str(name) in accepted for name in init_args):
        return None  # the base class takes them: jsonargparse builds it
    extra = next(str(name) for name in init_args if str(name) not in accepted)
    known = sorted(set(SECTIONS[section]) - {base})
    return (
        f"{section}.class_path is missing: its init_args are read as the base class {base}'s, which has no"
        f" option {extra!r}; name the class (e.g. {section}.class_path: {EXAMPLES[section]}; one of {', '.join(known)})"
    )


def classes_shape_problem(section: str, value: Any) -> str | None:
    """The line refusing the shape of ``federation.hooks`` or ``trainer.callbacks`` (:data:`LISTS`;
    each class as :func:`section_shape_problem` reads one, named ``federation.hooks[0]``), or ``None``."""
    if value is None:
        return None
    if isinstance(value, list):
        for index, item in enumerate(value):
            if problem := section_shape_problem(section, item, False, f"{section}[{index}]"):
                return problem
        return None
    if section == "trainer.callbacks" and isinstance(value, (dict, str)):
        return section_shape_problem(section, value, False)
    return (
        f"{section} must be {LISTS[section]}, each a class name or a mapping of its class_path and init_args"
        f" (e.g. {section}: [{{class_path: {EXAMPLES[section]}}}]), got {value!r}"
    )
