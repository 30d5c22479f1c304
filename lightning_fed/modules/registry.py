"""The local-objective registry: the subclasses of :class:`~lightning_fed.modules.base.FederatedModule`.

As for strategies (:mod:`lightning_fed.strategies.registry`), there is no name table: the CLI
resolves ``model.class_path: SimPOModule`` (or ``--model=SimPOModule``) by walking
``FederatedModule.__subclasses__()`` and matching the class name. A user's objective joins by
subclassing :class:`~lightning_fed.modules.base.FederatedModule` (usually
:class:`~lightning_fed.modules.preference.PreferenceModule`) in a module that has been imported:

* given once by its full path (``class_path: my_pkg.MyObjective``, ``my_pkg`` importable);
* or advertised by an installed package under the entry-point group :data:`ENTRY_POINT_GROUP`,
  which :func:`load_module_plugins` (called by the CLI before it parses) imports:

  .. code-block:: toml

     [project.entry-points."lightning_fed.modules"]
     my_objectives = "my_pkg.objectives"
"""

from __future__ import annotations

from lightning_fed.modules.base import FederatedModule
from lightning_fed.plugins import load_entry_points, short_names

ENTRY_POINT_GROUP = "lightning_fed.modules"


def load_module_plugins() -> list[str]:
    """Import every module advertised under :data:`ENTRY_POINT_GROUP` (see
    :func:`~lightning_fed.plugins.load_entry_points`)."""
    return load_entry_points(ENTRY_POINT_GROUP, "module")


def available_modules() -> dict[str, list[str]]:
    """Short name -> full class paths of every concrete :class:`FederatedModule` subclass imported so far."""
    return short_names(FederatedModule)
