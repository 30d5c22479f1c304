"""A failed run never deletes or rewrites a file an earlier run wrote.

A run resumed in its own folder (``--ckpt_path <run>/checkpoints/last.ckpt``), or started in a
folder that holds another run's files, replaces files it did not create: ``config.yaml``,
``summary.json``, ``client_sizes.parquet``, and it cuts ``rounds.jsonl`` and the per-client
Parquet files back to the checkpoint's rounds. Done at start-up, a run that then fails (a
checkpoint part that does not fit, a round where every update is rejected, a crash) would leave
the earlier run's records deleted or rewritten with nothing in their place.

:class:`EarlierFiles` remembers which files were in the folder when this run first touched it.
A write, a replacement or a deletion of one of them (:meth:`EarlierFiles.write`) waits until this
run has completed a round (:meth:`EarlierFiles.commit`, called when the round's record is
appended); a run that fails before that leaves them byte for byte as they were. Files this run
creates are written at once. :class:`RunConfigFile` is LightningCLI's ``config.yaml`` writer
under the same rule.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.cli import SaveConfigCallback
from typing_extensions import override

ATTRIBUTE = "_lightning_fed_earlier_files"
"""Where a Trainer (or a Flower server's context) keeps its run's :class:`EarlierFiles`."""


class EarlierFiles:
    """The files of ``folder`` that were there before this run, and the writes to them that wait.

    Args:
        folder: The run folder (the logger's version folder).
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        root = self.folder
        self._earlier = {self._key(p) for p in root.rglob("*") if p.is_file()} if root.is_dir() else set()
        self.committed = False
        self._pending: dict[str, Callable[[], None]] = {}

    @staticmethod
    def _key(path: str | Path) -> str:
        return os.path.abspath(path)

    def is_earlier(self, path: str | Path) -> bool:
        """Whether ``path`` held a file before this run touched the folder."""
        return self._key(path) in self._earlier

    def holds_earlier(self, under: str | Path) -> bool:
        """Whether any earlier file is ``under`` (a file or a folder)."""
        key = self._key(under)
        return any(p == key or p.startswith(key + os.sep) for p in self._earlier)

    def write(self, path: str | Path, action: Callable[[], None]) -> bool:
        """Run ``action`` (which writes, replaces or deletes ``path``) now if this run may touch
        ``path``, else once it has completed a round (the last action per path wins).

        Returns:
            Whether ``action`` ran now.
        """
        if self.committed or not self.holds_earlier(path):
            action()
            return True
        self._pending[self._key(path)] = action
        return False

    def commit(self) -> None:
        """This run completed a round: its records replace the earlier run's (the waiting writes run)."""
        if self.committed:
            return
        self.committed = True
        pending, self._pending = self._pending, {}
        for action in pending.values():
            action()


def earlier_files(owner: Any, folder: str | Path) -> EarlierFiles:
    """The run's :class:`EarlierFiles` of ``folder``, made on first use (kept on ``owner``, the
    Trainer: one per run). An owner that takes no attribute gets a fresh one per call."""
    guards = getattr(owner, ATTRIBUTE, None)
    if guards is None:
        guards = {}
        try:
            setattr(owner, ATTRIBUTE, guards)
        except AttributeError:
            pass
    key = os.path.abspath(folder)
    if key not in guards:
        guards[key] = EarlierFiles(folder)
    return guards[key]


def share_earlier_files(owner: Any, other: Any) -> None:
    """Give ``other`` (the run's ``RoundContext``) the :class:`EarlierFiles` of ``owner`` (its Trainer)."""
    guards = getattr(owner, ATTRIBUTE, None)
    if guards is None:
        guards = {}
        setattr(owner, ATTRIBUTE, guards)
    setattr(other, ATTRIBUTE, guards)


class RunConfigFile(SaveConfigCallback):
    """LightningCLI's ``config.yaml``, which does not replace an earlier run's before this run
    has completed a round (:class:`EarlierFiles`).

    A ``fit`` writes it at the start of fit (``on_fit_start``, after the loop's), with the options the
    run resolved then (:attr:`resolve`: ``federation.batch_clients`` as the K ``auto`` chose), so that
    the run's config reruns the run it describes."""

    #: Returns the resolved options as dotted keys (``{"federation.batch_clients": 4}``); set by the CLI.
    resolve: Callable[[], dict[str, Any]] | None = None

    @override
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit" and self.resolve is not None:
            return None  # written in on_fit_start, once the run has resolved its options
        return self._write(trainer, pl_module, stage)

    @override
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if self.resolve is None or self.already_saved:
            return
        resolved = self.resolve()
        if resolved:
            self.config = self.config.clone()
            for key, value in resolved.items():
                self.config[key] = value
        self._write(trainer, pl_module, "fit")

    def _write(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.already_saved or not self.save_to_log_dir:
            return super().setup(trainer, pl_module, stage)
        log_dir = trainer.log_dir  # a broadcast: every rank asks
        path = Path(log_dir) / self.config_filename
        if "file" not in _protocols(log_dir) or not path.is_file():
            return super().setup(trainer, pl_module, stage)
        if trainer.is_global_zero:
            text = self.parser.dump(self.config, skip_none=False)
            if path.read_text(encoding="utf-8", errors="replace") != text:
                earlier_files(trainer, log_dir).write(path, lambda: _replace_text(path, text))
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)
        return None


def _protocols(path: Any) -> tuple[str, ...]:
    protocol = get_filesystem(path).protocol
    return protocol if isinstance(protocol, tuple) else (protocol,)


def _replace_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def replace_bytes(path: Path, data: bytes) -> None:
    """Make ``path`` a new file holding ``data`` (written beside it, flushed, renamed over it), never
    writing through the old one: a run folder copied with hard links (``cp -al``) shares its files'
    inodes with the original, which a write in place would change too (red team 16 B07)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def own_files(path: Path) -> None:
    """Give ``path`` (a file, or each file under a folder) a file of its own (:func:`replace_bytes` of its
    bytes) where it shares its inode with another name (a hard-linked copy of the run folder), before a
    writer that appends or rewrites in place (Lightning's CSV writer, PEFT's ``save_pretrained``) changes
    it: the other folder's file stays as it was. Files with one name are left as they are."""
    for file in [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []:
        if file.is_file() and not file.is_symlink() and file.stat().st_nlink > 1:
            replace_bytes(file, file.read_bytes())
