"""The strategy registry: the subclasses of :class:`~lightning_fed.strategies.base.Strategy`.

There is no name table to keep in sync. The CLI (jsonargparse) resolves a short name such as
``--federation.strategy=FedNova`` by walking ``Strategy.__subclasses__()`` recursively and
matching the class name (``jsonargparse._typehints.resolve_class_path_by_name``); abstract,
private (``_``-prefixed module) and function-local classes are skipped, and a name two classes
share must be given as a full class path. So a strategy joins the registry by subclassing
:class:`Strategy` (or one of its family, e.g. ``FedAvg``) in a module that has been imported:

* the package's own strategies are imported by ``lightning_fed.strategies``;
* a user's strategy given once by its full path (``--federation.strategy=my_pkg.MyStrategy``,
  or ``class_path:`` in a YAML file, with ``my_pkg`` importable, e.g. on ``PYTHONPATH``) is
  imported by the parser itself;
* an installed package advertises its strategy modules under the entry-point group
  :data:`ENTRY_POINT_GROUP`; :func:`load_strategy_plugins` (called by the CLI before it
  parses) imports them, and their short names then work everywhere:

  .. code-block:: toml

     [project.entry-points."lightning_fed.strategies"]
     my_strategies = "my_pkg.strategies"
"""

from __future__ import annotations

from lightning_fed.plugins import load_entry_points, short_names
from lightning_fed.strategies.base import Strategy

ENTRY_POINT_GROUP = "lightning_fed.strategies"


def load_strategy_plugins() -> list[str]:
    """Import every module (or object) advertised under :data:`ENTRY_POINT_GROUP`.

    Returns:
        The entry points' values (``"my_pkg.strategies"``), in the order they were loaded.

    Raises:
        ImportError: One line naming the entry point and its distribution if it fails to load.
    """
    return load_entry_points(ENTRY_POINT_GROUP, "strategy")


def available_strategies() -> dict[str, list[str]]:
    """Short name -> full class paths of every concrete :class:`Strategy` subclass imported so far.

    The names are the ones ``--federation.strategy=<name>`` accepts; a name with more than one
    path is ambiguous and needs the full path. Mirrors jsonargparse's rules (see the module
    docstring) so that an error message can list the valid choices.
    """
    return short_names(Strategy)
