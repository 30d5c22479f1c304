"""The per-user key store a private run keeps its key file in, and what stops a key being written there,
with no torch imported (the precheck reads it: :func:`~lightning_fed.federation.early_check.precheck_key_store`).
The key file itself is :mod:`~lightning_fed.federation.run_key_file`'s.
"""

from __future__ import annotations

import os
from pathlib import Path

from lightning_fed.path_kinds import not_a_file

KEY_DIR_ENV = "LIGHTNING_FED_KEY_DIR"
"""The environment variable that moves the key store (:func:`key_dir`)."""


def key_dir() -> Path:
    """The per-user key store: ``$LIGHTNING_FED_KEY_DIR``, else ``$XDG_DATA_HOME/lightning-fed/keys``,
    else ``~/.local/share/lightning-fed/keys``."""
    given = os.environ.get(KEY_DIR_ENV)
    if given:
        return Path(given).expanduser().absolute()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data).expanduser().absolute() / "lightning-fed" / "keys"


def key_store_problem() -> str | None:
    """Why no key file can be written in the key store (:func:`key_dir`): it, or a folder above it, is there
    but is no folder (a FIFO, a file, a symlink to a device); ``None`` otherwise (a folder, or nothing yet:
    the first key makes it). A private run in such a store trained a round, wrote its run folder, then failed
    writing its key (``NotADirectoryError``, exit 1)."""
    store = key_dir()
    for path in (store, *store.parents):
        if not os.path.lexists(path):
            continue
        if path.is_dir():
            return None
        kind = not_a_file(path) or "a regular file"
        named = f"{KEY_DIR_ENV} {store}" if os.environ.get(KEY_DIR_ENV) else f"the key store {store}"
        what = f"{named} is {kind}" if path == store else f"{named}: {path} is {kind}"
        return f"{what}, not a folder: a private run writes its key file there; point {KEY_DIR_ENV} at a folder"
    return None
