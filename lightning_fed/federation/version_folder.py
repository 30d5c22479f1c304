"""Each run writes into a version folder it holds alone.

Lightning's TensorBoard and CSV loggers pick ``version_N`` by listing the ``version_*`` folders
(``_get_next_version``) and create it later with ``os.makedirs(..., exist_ok=True)``, when the
first file is written: two runs started together in one ``default_root_dir`` both took
``version_0`` and wrote into it (one run's ``config.yaml`` beside the other's ``summary.json``,
``rounds.jsonl`` interleaved). Here a new run claims its folder with ``os.mkdir`` (no
``exist_ok``: atomic, also on NFS), taking the next number on ``FileExistsError``
(:func:`claim_version`); a resumed run continues in its checkpoint's folder (:func:`hold`).

Either way the run holds an exclusive ``fcntl.flock`` on :data:`LOCK_FILE` in the folder while it
runs (the kernel drops it when the process ends, killed or not), so a second resume of the same
checkpoint, or a resume of a run still going, is refused (:class:`FolderHeld`) instead of writing
into it too. A resume takes it before torch is imported (:func:`hold_early`, the live CLI adopting
that hold: :func:`adopt`), so two resumes started together never both pass. ``validate`` and ``test``
hold the checkpoint's run folder the same way while they write ``<stage>_results.json`` into it
(:func:`~lightning_fed.federation.early_check.hold_evaluated`; red team 10 row 11: a ``validate``
wrote into the folder of a resume still running). A folder this run made that holds nothing but the
lock file when it ends (a refusal before the first write) is removed again, and so is a lock file
this run made in an earlier run's folder (one copied without it, or older than the lock): a refused
resume leaves that folder as it was (:meth:`HeldFolder.release`). A lock file is removed only while
its ``flock`` is held, and a run that locked a file checks that the file is still the one under the
name (:func:`_lock`), so a run that opened the file before it was removed never holds it beside a
run that locks the new one.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from lightning_fed.errors import UserError
from lightning_fed.federation.client_metrics import ROUNDS_FILE

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: the mkdir claim still holds, the resume lock does not
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".lock"
"""The file in a run folder whose ``flock`` the run holds while it runs."""

VERSION = re.compile(r"version_(\d+)")
"""A Lightning version folder's name."""


class FolderHeld(UserError):
    """Another run holds the run folder (its :data:`LOCK_FILE` is locked): exit 2, nothing written."""


def is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` is a run's folder: it holds the run's round history (``rounds.jsonl``, which a
    ``fit`` writes there at each round's end, before that round's checkpoint: no folder of the user's that
    merely holds a ``checkpoints/`` has it), or it is named ``version_N`` (Lightning's version folder, also
    one copied without its records). Its name does not matter otherwise: a copy renamed ``backup/myrun``
    is still the run's folder (issue 41)."""
    return VERSION.fullmatch(folder.name) is not None or (folder / ROUNDS_FILE).is_file()


def checkpoint_run(ckpt_path: Any) -> Path | None:
    """The run folder (absolute) a checkpoint at ``<run>/checkpoints/<file>`` belongs to (:func:`is_run_folder`):
    the folder a resume (``validate``/``test`` too) continues in, holds before torch is imported and reads
    the run's files from (``rounds.jsonl``, ``client_states/``), wherever it lies now and whatever it is named
    (copied, moved or renamed); ``None`` for a checkpoint elsewhere (a ``ModelCheckpoint`` with a ``dirpath``
    of its own: the run then goes on in a new ``version_N`` and reads the records of the folder stored in the
    checkpoint), a remote one, or Lightning's ``last``/``best``/``hpc``/``registry``."""
    if not ckpt_path or str(ckpt_path) in ("last", "best", "hpc", "registry") or "://" in str(ckpt_path):
        return None
    path = Path(ckpt_path).absolute()
    if path.parent.name == "checkpoints" and is_run_folder(path.parent.parent):
        return path.parent.parent
    return None


def taken_versions(parent: Path) -> list[int]:
    """The numbers of the ``version_N`` entries in ``parent`` (none if it does not exist)."""
    try:
        with os.scandir(parent) as entries:
            return [int(m.group(1)) for entry in entries if (m := VERSION.fullmatch(entry.name))]
    except (FileNotFoundError, NotADirectoryError):
        return []


def next_version(parent: Path) -> Path:
    """The ``version_N`` after the highest in ``parent``: where a new run would go (not claimed)."""
    return parent / f"version_{max(taken_versions(parent), default=-1) + 1}"


class HeldFolder:
    """A run folder this process holds (:func:`claim_version`, :func:`hold`).

    Args:
        folder: The version folder.
        created: The folders this run made for it, outermost first (``folder`` last when it is new).
        lock: The open lock file whose ``flock`` is held (``None`` without ``fcntl``).
        made_lock: Whether this run made the lock file (it had none): removed when the run lets go
            of an earlier run's folder (:meth:`release`).
    """

    def __init__(self, folder: Path, created: list[Path], lock: Any, made_lock: bool = False) -> None:
        self.folder = folder
        self.created = created
        self._lock = lock
        self._made_lock = made_lock

    @property
    def version(self) -> int:
        """``N`` of ``version_N``."""
        return int(VERSION.fullmatch(self.folder.name).group(1))

    def release(self) -> None:
        """Let go of the lock; remove the folders this run made if nothing but the lock file is in them,
        and the lock file this run made in an earlier run's folder (the lock still held as it goes)."""
        if self._lock is None and not self.created:
            return
        if self._made_lock and self._lock is not None and not (self.created and self.created[-1] == self.folder):
            (self.folder / LOCK_FILE).unlink(missing_ok=True)  # the folder as the earlier run left it
        if self.created and self.created[-1] == self.folder:
            names = {entry.name for entry in os.scandir(self.folder)} if self.folder.is_dir() else set()
            if names <= {LOCK_FILE}:  # nothing written: a refused run leaves no folder behind
                (self.folder / LOCK_FILE).unlink(missing_ok=True)
                for made in reversed(self.created):
                    try:
                        os.rmdir(made)  # only while empty: never another run's folder
                    except OSError:
                        break
        if self._lock is not None:
            self._lock.close()  # closing the file releases its flock
        self._lock, self.created = None, []


def _open_lock(path: Path) -> tuple[int, bool]:
    """Open the lock file ``path`` (an existing one first, else a new one): its descriptor and whether it
    was made here."""
    while True:
        try:
            return os.open(path, os.O_RDWR | os.O_APPEND), False
        except FileNotFoundError:
            pass
        try:
            return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:  # another run made it meanwhile: open that one
            continue


def _still_named(descriptor: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``descriptor`` (its holder may have removed it)."""
    try:
        named, held = os.stat(path), os.fstat(descriptor)
    except FileNotFoundError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _lock(folder: Path) -> tuple[Any, bool]:
    """Open ``folder``'s :data:`LOCK_FILE` and take its ``flock`` without waiting: the open file (``None``
    if another run holds it) and whether this call made the file. A file removed by its holder between
    the open and the lock (:meth:`HeldFolder.release`) is let go, and the file now named is locked."""
    if fcntl is None:  # pragma: no cover
        return False, False
    path = folder / LOCK_FILE
    while True:
        descriptor, made = _open_lock(path)
        handle = os.fdopen(descriptor, "a+b")  # held open for the run
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None, False
        if _still_named(handle.fileno(), path):
            return handle, made
        handle.close()


def claim_version(parent: str | Path) -> HeldFolder:
    """Make a new ``version_N`` in ``parent`` (and ``parent`` if missing) and lock it.

    ``N`` is the next after those listed; a folder another run made since the listing is skipped
    (``os.mkdir`` without ``exist_ok`` fails on it), never shared.
    """
    parent = Path(parent).absolute()
    created = []
    for folder in [*reversed(parent.parents), parent]:
        if not folder.exists():
            try:
                os.mkdir(folder)
                created.append(folder)
            except FileExistsError:
                pass
    number = max(taken_versions(parent), default=-1) + 1
    while True:
        folder = parent / f"version_{number}"
        try:
            os.mkdir(folder)
            break
        except FileExistsError:
            number += 1
    created.append(folder)
    lock, made = _lock(folder)  # a new folder has no checkpoint: nothing else can hold it
    return HeldFolder(folder, created, lock or None, made)


def hold(folder: str | Path, refusal: str, then: str = "resume") -> HeldFolder:
    """Lock the existing run folder ``folder``.

    Raises:
        FolderHeld: ``refusal`` and the lock, if another run holds it (``then``: what to do once it ended).
        UserError: If the lock file cannot be opened (a read-only folder).
    """
    folder = Path(folder).absolute()
    try:
        lock, made = _lock(folder)
    except OSError as err:  # a read-only folder: the run could not write its records there either
        raise UserError(f"{refusal}: cannot lock its run folder {str(folder)!r} ({err.strerror or err})") from None
    if lock is None:
        raise FolderHeld(held_line(refusal, folder, then))
    return HeldFolder(folder, [], lock or None, made)


_EARLY: dict[Path, HeldFolder] = {}
"""Folders held before torch was imported (:func:`hold_early`), until the live CLI adopts them."""


def hold_early(folder: str | Path, refusal: str, then: str = "resume") -> None:
    """:func:`hold` ``folder`` before torch is imported (the precheck's
    :func:`~lightning_fed.federation.early_check.hold_resumed`) and keep it for the live CLI
    (:func:`adopt`): a second resume started while the first imports is refused before torch too
    (red team 9 row 8: a look at the lock let it pass, the run taking the lock only later).

    Raises:
        FolderHeld: ``refusal`` and the lock, if another run holds it.
    """
    folder = Path(folder).absolute()
    if folder not in _EARLY:
        _EARLY[folder] = hold(folder, refusal, then)


def adopt(folder: str | Path, refusal: str, then: str = "resume") -> HeldFolder:
    """The hold :func:`hold_early` took of ``folder`` in this process, else a new :func:`hold` (a second
    ``flock`` of the file from this process would find it taken, by this very process)."""
    return _EARLY.pop(Path(folder).absolute(), None) or hold(folder, refusal, then)


def release_early() -> None:
    """Let go of the holds :func:`hold_early` took that no run adopted (the process refused or failed
    before): an in-process caller's next run may take them."""
    held = list(_EARLY.values())
    _EARLY.clear()
    for folder in held:
        folder.release()


def held_line(refusal: str, folder: Path, then: str = "resume") -> str:
    """The line refusing a resume (``then``: ``validate``, ``test``) whose run folder ``folder`` (absolute)
    another run holds."""
    return (
        f"{refusal}: another run holds its run folder {str(folder)!r} ({LOCK_FILE} is locked);"
        f" {then} once that run has ended"
    )


def held_by_another(folder: str | Path) -> bool:
    """Whether another process holds ``folder``'s :data:`LOCK_FILE` now. Creates nothing: a folder without
    the file is held by no one; the lock, if it was free, is let go at once (:func:`hold` takes it)."""
    if fcntl is None:  # pragma: no cover
        return False
    try:
        descriptor = os.open(Path(folder) / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(descriptor)  # closing it lets go of a lock taken here
    return False
