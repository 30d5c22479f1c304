"""What a path is when it is there but is no regular file, asked of ``stat`` alone: a FIFO is never
opened (opening one blocks until a writer comes) and a device never read (``/dev/zero`` never ends).

Shared by the lines that refuse such a path where a file is read: a run's key file
(:mod:`~lightning_fed.federation.run_key_file`), ``--ckpt_path``
(:func:`~lightning_fed.federation.early_check.path_problem`), a file of a data folder
(:func:`~lightning_fed.data_paths.folder_problem`), a cached model copy's file
(:mod:`~lightning_fed.model_packages`), ``evaluate``'s input files (:func:`no_file_said`).
Imports neither torch nor anything that does.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def not_a_file(path: Path) -> str | None:
    """What ``path`` is when it is there but not a regular file (``"a FIFO"``, ``"a symlink to a character
    device /dev/zero"``, ...), from ``stat`` alone (a FIFO is never opened); ``None`` for a regular file
    or a path that is not there at all."""
    if not os.path.lexists(path):
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError as err:  # a dangling symlink, a loop, no permission
        return f"unreadable: {err.strerror}"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"a symlink to {kind} {os.path.realpath(path)}" if path.is_symlink() else kind


def no_file_said(path: Path) -> str | None:
    """How a line goes on after an option and its value when ``path`` is no regular file to read:
    ``": no such file"``, or ``" is a FIFO, not a regular file"`` (a folder, a device: :func:`not_a_file`,
    never opened); ``None`` for a regular file. Red team 17 B17: a FIFO given to ``evaluate`` was
    "no such file", a file that ``ls`` shows."""
    if path.is_file():
        return None
    kind = not_a_file(path)
    return f" is {kind}, not a regular file" if kind and not kind.startswith("unreadable") else ": no such file"
