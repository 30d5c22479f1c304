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
from packaging.version import InvalidVersion, Version
from typing_extensions import override

from lightning_fed.errors import CheckpointError

TMP_SUFFIX = ".tmp"


RESUME_FIELDS: dict[str, type | tuple[type, ...]] = {
    "epoch": int,
    "global_step": int,
    "loops": dict,
    "callbacks": dict,
    "optimizer_states": list,
    "lr_schedulers": list,
}
"""What Lightning reads from a checkpoint to resume a fit, besides the version and ``state_dict``."""


def read_checkpoint(path: str | Path, field: str = "ckpt_path", stage: str | None = None) -> dict[str, Any]:
    """A Lightning checkpoint read as Lightning reads it on resume: ``weights_only=True`` (tensors,
    containers, numbers and the allow-listed config classes only), so a crafted file cannot run code.

    Args:
        path: The checkpoint file.
        field: The option that named it, for the message (``ckpt_path``, ``selector.path``, ``--run``).
        stage: What the checkpoint is loaded for: ``None`` (its weights only), ``"fit"`` (resume:
            every field Lightning restores a fit from) or another trainer stage (``validate``,
            ``test``, ``predict``: the weights and the Lightning version).

    Raises:
        CheckpointError: One line naming ``field`` and the file, if it is refused, truncated,
            corrupt, not a Lightning checkpoint, or lacks (or mistypes) a field ``stage`` needs.
    """
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - every way a read can fail is reported as such
        first = " ".join(str(err).split())[:200]
        raise CheckpointError(
            f"{field} {str(path)!r}: not a safe, complete checkpoint: the file is incomplete or corrupt,"
            f" or holds objects that weights_only=True refuses ({type(err).__name__}: {first})"
        ) from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise CheckpointError(f"{field} {str(path)!r}: not a Lightning checkpoint (no 'state_dict')")
    problem = checkpoint_problem(ckpt, stage)
    if problem:
        raise CheckpointError(f"{field} {str(path)!r}: not a Lightning checkpoint this run can load: {problem}")
    return ckpt


def checkpoint_problem(ckpt: dict[str, Any], stage: str | None = None) -> str | None:
    """What is wrong with a loaded checkpoint for ``stage`` (see :func:`read_checkpoint`), or ``None``."""
    state = ckpt.get("state_dict")
    if not isinstance(state, dict):
        return f"'state_dict' is a {type(state).__name__}, expected a mapping of names to tensors"
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            return f"'state_dict' entry {key!r} is a {type(value).__name__}, expected a tensor"
    if stage is None:
        return None
    version = ckpt.get("pytorch-lightning_version")
    try:
        Version(version)
    except (InvalidVersion, TypeError):
        return f"'pytorch-lightning_version' is {version!r}, expected a version string"
    if stage != "fit":
        return None
    for key, kind in RESUME_FIELDS.items():
        value = ckpt.get(key)
        if key not in ckpt:
            return f"no {key!r} (a fit resumes from what Lightning saved with it)"
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"{key!r} is a {type(value).__name__}, expected {getattr(kind, '__name__', kind)}"
    if ckpt["epoch"] < 0 or ckpt["global_step"] < 0:
        return f"'epoch'={ckpt['epoch']} and 'global_step'={ckpt['global_step']} must be >= 0"
    bad = [k for k, v in ckpt["loops"].items() if not isinstance(v, dict)]
    if bad:
        return f"'loops' entry {bad[0]!r} is a {type(ckpt['loops'][bad[0]]).__name__}, expected a mapping"
    return None


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
