"""Plugins: classes found by short name once their module is imported, and the entry points
that import an installed package's modules (the strategy and objective registries use both:
:mod:`lightning_fed.strategies.registry`, :mod:`lightning_fed.modules.registry`)."""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import entry_points


def load_entry_points(group: str, kind: str) -> list[str]:
    """Import every module (or object) advertised under the entry-point ``group``, sorted by name.

    Args:
        group: The entry-point group (``lightning_fed.strategies``, ``lightning_fed.modules``).
        kind: What the group holds, for the error message (``strategy``, ``module``).

    Returns:
        The entry points' values, in the order they were loaded.

    Raises:
        ImportError: One line naming the entry point and its distribution if it fails to load.
    """
    loaded = []
    for ep in sorted(entry_points(group=group), key=lambda e: (e.name, e.value)):
        try:
            ep.load()
        except Exception as err:  # a plugin's own error, reported with where it came from
            dist = getattr(ep.dist, "name", "?")
            raise ImportError(
                f"{kind} plugin {ep.name} = {ep.value!r} (entry point group {group!r},"
                f" distribution {dist}) failed to load: {type(err).__name__}: {err}"
            ) from err
        loaded.append(ep.value)
    return loaded


def short_names(base: type) -> dict[str, list[str]]:
    """Short name -> full class paths of the concrete subclasses of ``base`` imported so far,
    skipping abstract, function-local and private-module classes, as jsonargparse does."""
    names: dict[str, list[str]] = {}
    seen: set[type] = set()
    stack = list(base.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        stack.extend(cls.__subclasses__())
        path = f"{_public_module(cls)}.{cls.__qualname__}"
        if inspect.isabstract(cls) or "<locals>" in cls.__qualname__ or "._" in path:
            continue
        names.setdefault(cls.__name__, []).append(path)
    return {name: sorted(paths) for name, paths in sorted(names.items())}


def _public_module(cls: type) -> str:
    """The shortest parent package of ``cls.__module__`` that exports ``cls`` (as jsonargparse prints it)."""
    parts = cls.__module__.split(".")
    for i in range(1, len(parts)):
        module = importlib.import_module(".".join(parts[:i]))
        if getattr(module, cls.__name__, None) is cls:
            return module.__name__
    return cls.__module__
