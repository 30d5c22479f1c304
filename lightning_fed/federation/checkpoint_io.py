"""Checkpoint files that are either the old version or the new one, never half of one.

Lightning's ``TorchCheckpointIO`` writes through an fsspec transaction whose temporary file
lives in the system temp folder; when that is another filesystem the final move is a copy,
and a ``kill -9`` during it leaves a truncated ``last.ckpt``. :class:`AtomicCheckpointIO`
writes next to the target, flushes to disk, and renames over it (``os.replace`` is atomic
on POSIX and Windows), then syncs the folder so the rename itself survives a power cut.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.plugins.io import TorchCheckpointIO
from typing_extensions import override

from lightning_fed.federation.checkpoint_read import RESUME_FIELDS, checkpoint_problem, read_checkpoint

__all__ = ["RESUME_FIELDS", "AtomicCheckpointIO", "atomic_write_bytes", "checkpoint_problem", "read_checkpoint"]

TMP_SUFFIX = ".tmp"


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (write a sibling, fsync, rename, fsync the folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f"{path.name}.*{TMP_SUFFIX}"):  # left by a writer that was killed
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}{TMP_SUFFIX}")
    try:
        with open(tmp, "wb") as f:
            write_chunks(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    if hasattr(os, "O_DIRECTORY"):
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_chunks(f: Any, data: bytes, chunk: int = 1 << 22) -> None:
    """Write ``data`` in 4 MiB pieces (a kill can land between any two of them)."""
    view = memoryview(data)
    for start in range(0, len(view), chunk):
        f.write(view[start : start + chunk])


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` with atomic local writes; remote paths keep Lightning's own path."""

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        protocol = get_filesystem(path).protocol
        if storage_options is not None or "file" not in (protocol if isinstance(protocol, tuple) else (protocol,)):
            return super().save_checkpoint(checkpoint, path, storage_options)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(path, buffer.getbuffer().tobytes())
