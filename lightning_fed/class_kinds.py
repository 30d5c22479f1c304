"""What kind of class a ``class_path`` of the package names, told from its source (no torch).

``data.class_path: lightning_fed.strategies.FedAvg`` names a class that exists, so the checks of
:mod:`lightning_fed.class_options` let it through, and jsonargparse refused it after torch,
Lightning and transformers were imported (9-11 s of CPU) with ``Import path ... does not
correspond to a subclass of FederatedDataModule``, saying neither what FedAvg is nor what to
write. Here a package class's kind is read from the class statements of its source
(:func:`~lightning_fed.class_paths.package_subclasses`, the same reading that lists the short
names a strategy or round hook takes) and a class of another kind is refused naming both kinds
and the section's classes. A user's own class, or a class of no kind listed here, is left to the
live parser.
"""

from __future__ import annotations

import difflib
from typing import Any

from lightning_fed.class_locations import defined
from lightning_fed.class_paths import package_subclasses

KINDS = {
    "model": ("FederatedModule", "a model"),
    "data": ("FederatedDataModule", "a data module"),
    "federation.strategy": ("Strategy", "a server strategy"),
    "federation.hooks": ("RoundHook", "a round hook"),
}
"""Each class-valued section -> the package's base class its classes derive from, and what they are."""
OTHER_KINDS = {"Partitioner": "a partitioner (data.partition)", "Callback": "a Lightning callback (trainer.callbacks)"}
"""Other kinds of the package's classes a ``class_path`` may name by mistake."""
NOT_CHOSEN = frozenset(
    {"FederatedModule", "FederatedDataModule", "FedOpt", "HeterogeneousRankLoRA", "PreferenceModule"}
)
"""Bases no run names (left out of the choices shown)."""


def kind_of(name: str) -> tuple[str, str] | None:
    """``(base, what it is)`` of the package's class ``name`` (its last dotted part), or ``None``."""
    for base, what in [*KINDS.values(), *OTHER_KINDS.items()]:
        if name == base or name in package_subclasses(base):
            return base, what
    return None


def wrong_kind_problem(section: str, value: Any, key: str | None = None) -> str | None:
    """The line refusing ``section``'s ``class_path`` (``{"class_path", ...}``) that names one of the
    package's classes of another kind (a strategy as ``data:``), or ``None``. A dotted path counts
    only inside ``lightning_fed`` and where its module binds the name; a short name only if it is
    no class of the section's kind."""
    if section not in KINDS or not isinstance(value, dict) or not isinstance(value.get("class_path"), str):
        return None
    class_path = value["class_path"]
    module, _, name = class_path.rpartition(".")
    if module and not (module.split(".")[0] == "lightning_fed" and defined(module, name)):
        return None
    base, expected = KINDS[section]
    if name == base or name in package_subclasses(base):
        return None
    found = kind_of(name)
    if found is None:
        return None
    choices = sorted(package_subclasses(base) - NOT_CHOSEN)
    near = difflib.get_close_matches(name, choices, n=1, cutoff=0.75)
    hint = f"did you mean {near[0]}?" if near else f"one of {', '.join(choices)}"
    return (
        f"{key or section}: class_path {class_path!r} is {found[1]} (a subclass of {found[0]}),"
        f" not {expected} (a subclass of {base}); {hint}"
    )


def package_class(section: str, class_path: str) -> bool:
    """Whether ``class_path`` (short or dotted) names one of the package's classes of ``section``'s
    kind (a strategy or round hook may live outside its package: ``lightning_fed.privacy.ClientLevelDP``,
    ``lightning_fed.heterogeneity.ClientRanks``)."""
    module, _, name = class_path.rpartition(".")
    if module and module.split(".")[0] != "lightning_fed":
        return False
    return name in package_subclasses(KINDS[section][0])
