"""Reading a checkpoint file as input: its bytes first, then ``torch.load(weights_only=True)``.

``torch.save`` writes a zip archive (one member per tensor's storage, one for the pickled
structure), each member with its CRC-32; ``torch.load`` reads the members without checking it, so
a flipped byte inside a tensor's data loaded as a slightly different weight, silently (found from
outside, issue 41). :func:`zip_problem` reads every member through :mod:`zipfile`, which checks
each one's CRC-32 as it reads (no cryptography of ours: the archive's own checksum), and names
the first damaged member; a file cut short has no zip directory at its end and is named so.
A SmolLM2-135M checkpoint (~540 MB) costs about half a second more to read this way (the bytes
then come from the page cache for ``torch.load``).

Only torch, ``packaging`` and the standard library are imported here: the CLI checks a resumed
checkpoint right after the config, before Lightning and transformers are imported
(:mod:`lightning_fed.federation.early_check`).
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

import torch
from packaging.version import InvalidVersion, Version

from lightning_fed.errors import CheckpointError

ZIP_MAGIC = b"PK\x03\x04"
"""The first bytes of a zip archive (``torch.save``'s format since torch 1.6)."""
CHUNK = 1 << 22

RESUME_FIELDS: dict[str, type | tuple[type, ...]] = {
    "epoch": int,
    "global_step": int,
    "loops": dict,
    "callbacks": dict,
    "optimizer_states": list,
    "lr_schedulers": list,
}
"""What Lightning reads from a checkpoint to resume a fit, besides the version and ``state_dict``."""


def zip_problem(path: str | Path) -> str | None:
    """What is wrong with the bytes of a ``torch.save`` zip archive, or ``None``.

    Every member is read to its end, so its CRC-32 is compared with the one the archive holds; a
    file that starts as a zip archive but has no directory at its end was cut short. A file that
    is not a zip archive at all is left to ``torch.load`` (the legacy format, or not a checkpoint).
    """
    with open(path, "rb") as f:
        if f.read(len(ZIP_MAGIC)) != ZIP_MAGIC:
            return None
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        return f"it starts as a zip archive but its zip directory is missing or damaged (truncated?): {err}"
    with archive:
        for info in archive.infolist():
            try:
                with archive.open(info) as member:
                    while member.read(CHUNK):
                        pass
            except zipfile.BadZipFile as err:  # "Bad CRC-32 for file ...", or a damaged header
                if "CRC" in str(err):
                    return f"zip member {info.filename!r} fails its CRC-32 check (its bytes changed after it was saved)"
                return f"zip member {info.filename!r} is damaged ({err})"
            except (OSError, EOFError, ValueError, NotImplementedError, RuntimeError) as err:
                return f"zip member {info.filename!r} cannot be read ({type(err).__name__}: {err})"
    return None


def load_error(err: BaseException, limit: int = 200) -> str:
    """``torch.load``'s error as a complete clause of one line: the class a ``weights_only=True``
    load refuses (``UnpicklingError: unsupported global __main__.Payload``), else the error's first
    sentence (``RuntimeError: PytorchStreamReader failed reading zip archive: not a ZIP archive.``;
    the rest is advice on loading files one trusts), cut at a word if still over ``limit``."""
    text = " ".join(str(err).split())
    if match := re.search(r"Unsupported global: GLOBAL ([\w.]+)", text):
        return f"{type(err).__name__}: unsupported global {match.group(1)}"
    text = text.split("WeightsUnpickler error: ", 1)[-1]
    first = re.split(r"(?<=[.!?]) ", text, maxsplit=1)[0]
    if len(first) > limit:
        first = first[:limit].rsplit(" ", 1)[0] + " ..."
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


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
            corrupt (a zip member failing its CRC-32), not a Lightning checkpoint, or lacks (or
            mistypes) a field ``stage`` needs.
    """
    try:
        damaged = zip_problem(path)
    except OSError as err:
        raise CheckpointError(f"{field} {str(path)!r}: cannot be read ({err.strerror or err})") from None
    if damaged:
        raise CheckpointError(
            f"{field} {str(path)!r}: not a safe, complete checkpoint: the file is incomplete or corrupt: {damaged}"
        )
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - every way a read can fail is reported as such
        raise CheckpointError(
            f"{field} {str(path)!r}: not a safe, complete checkpoint: the file is incomplete or corrupt,"
            f" or holds objects that weights_only=True refuses ({load_error(err)})"
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
