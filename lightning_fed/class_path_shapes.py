"""The shape of a ``model:`` / ``data:`` section in a config file: ``class_path`` and ``init_args``.

jsonargparse reads such a section as a class: a ``class_path`` (a class name or a dotted path) and
its ``init_args``. What it says of a wrong shape comes after torch is imported (8-9 s of CPU) and
names no key: ``argument of type 'float' is not iterable`` (``class_path: -0.0``), ``Not a valid
subclass of FederatedModule Subclass types expect one of:`` (``class_pathx:``), or ``Option 'beta'
is not accepted`` (``class_path`` deleted: ``init_args`` alone are read as the base class's,
:data:`BASES`). :func:`section_shape_problem` says these before the imports, naming the key.
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
EXAMPLES = {"model": "lightning_fed.modules.DPOModule", "data": "lightning_fed.datamodules.PreferenceDataModule"}
"""The class the error shows as an example (the shipped ``tiny`` config's)."""


def _dotted_name(value: str) -> bool:
    return bool(value) and all(part.isidentifier() for part in value.split("."))


def section_shape_problem(section: str, value: Any, earlier_class: bool) -> str | None:
    """The line refusing the shape of ``section``'s value (``model`` or ``data``) as a config file
    gives it, or ``None``. ``earlier_class``: an earlier file or option already named its class
    (``init_args`` alone then apply to that class)."""
    if section not in BASES or not isinstance(value, dict):
        return None
    known = sorted(set(SECTIONS[section]) - {BASES[section]})
    for key in value:
        if str(key) not in CLASS_KEYS:
            near = difflib.get_close_matches(str(key), CLASS_KEYS, n=1, cutoff=0.6)
            hint = f"did you mean {section}.{near[0]}?" if near else f"its keys: {', '.join(CLASS_KEYS[:2])}"
            return f"{section}.{key} is not a key of {section}: (a class_path and its init_args); {hint}"
    if "class_path" in value:
        class_path = value["class_path"]
        if not isinstance(class_path, str) or not _dotted_name(class_path):
            return (
                f"{section}.class_path must be a class name or a dotted class path"
                f" (e.g. {EXAMPLES[section]}), got {class_path!r}"
            )
        return None
    init_args = value.get("init_args")
    if earlier_class or not isinstance(init_args, dict):
        return None
    base = BASES[section]
    accepted = parameters(PACKAGES[section], base)
    if accepted is None or all(str(key) in accepted for key in init_args):
        return None  # the base class takes them: jsonargparse builds it
    extra = next(str(key) for key in init_args if str(key) not in accepted)
    return (
        f"{section}.class_path is missing: its init_args are read as the base class {base}'s, which has no"
        f" option {extra!r}; name the class (e.g. {section}.class_path: {EXAMPLES[section]}; one of {', '.join(known)})"
    )
