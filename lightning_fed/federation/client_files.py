"""A client's state file: its format, its name and what is checked when one is read.

A client's state (``{"personal": ..., "memory": ...}``, see :mod:`~lightning_fed.federation.store`)
is one safetensors file, ``client_<k>-<digest>.safetensors``: the tensors under ``personal/`` and
``memory/``, one metadata key ``[format, client, run]``, and the name the digest of those bytes,
so a name never holds two different states. A file is input when a checkpoint references it:
:func:`read_entry` checks its name, digest, owner and tensors against the module.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from lightning_fed.errors import CheckpointError
from lightning_fed.state import StateDict

INDEX_FORMAT = 1
PARTS = ("personal", "memory")
METADATA_KEY = "lightning_fed.client_state"
"""The safetensors metadata of a client's file: ``[format, client id, run]`` (JSON)."""
FILE_NAME = re.compile(r"client_(\d+)-([0-9a-f]{16})\.safetensors")

Entry = dict[str, StateDict]


def empty_entry() -> Entry:
    return {"personal": {}, "memory": {}}


def encode_entry(client_id: int, entry: Entry, run: str = "") -> tuple[str, bytes]:
    """A client's state as safetensors bytes, and the file name its content gives it.

    The run is part of the content (metadata), so two runs never produce the same name, even
    for equal states: a run deletes only files of its own.
    """
    flat = {f"{part}/{k}": v.contiguous() for part in PARTS for k, v in entry.get(part, {}).items()}
    # One metadata key: safetensors writes several in no fixed order, and the name hashes the bytes.
    data = save_safetensors(flat, metadata={METADATA_KEY: json.dumps([INDEX_FORMAT, client_id, run])})
    return f"client_{client_id}-{hashlib.blake2b(data, digest_size=8).hexdigest()}.safetensors", data


def read_entry(path: Path, client_id: int | None = None, layout: Layout | None = None) -> Entry:
    """A client's state from its file (see :func:`encode_entry`).

    With ``client_id`` the file must have its canonical name (``client_<id>-<digest>``, the
    digest is checked) and its metadata must say it is that client's (a file of client 0 renamed
    after client 1, digest and all, is refused); every tensor must be finite floating point (a
    NaN would make every update of that client rejected, round after round). With ``layout``
    (:func:`state_layout`) every tensor must also be named and shaped as a parameter of the
    module: a file is input, and a wrong shape would otherwise fail inside a local step.

    Raises:
        CheckpointError: One line naming the file if it is missing, truncated, not the content
            its name says, another client's, or holds a tensor the module has no place for.
    """
    who = f"client {client_id}'s state file" if client_id is not None else "client state file"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(
            f"{who} {str(path)!r} is missing: the checkpoint references it; copy the run's client_states/ folder"
            " with its checkpoints/ (same layout)"
        ) from None
    match = FILE_NAME.fullmatch(path.name)
    if client_id is not None and (match is None or int(match.group(1)) != client_id):
        raise CheckpointError(
            f"{who} {str(path)!r} is not named client_{client_id}-<digest>.safetensors: its content cannot be checked"
        )
    if match and hashlib.blake2b(data, digest_size=8).hexdigest() != match.group(2):
        raise CheckpointError(f"{who} {str(path)!r} is corrupt: its content does not match the digest in its name")
    try:
        flat = load_safetensors(data)
    except SafetensorError as err:
        raise CheckpointError(f"{who} {str(path)!r} is not a safetensors file ({err})") from None
    if client_id is not None and (owner := _owner(data)) != client_id:
        said = "does not say whose state it is" if owner is None else f"holds client {owner}'s state"
        raise CheckpointError(
            f"{who} {str(path)!r} {said} (its {METADATA_KEY!r} metadata): it is not the file the checkpoint"
            f" references for client {client_id}"
        )
    entry = empty_entry()
    for key, value in flat.items():
        part, _, name = key.partition("/")
        problem = _tensor_problem(part, name, value, layout)
        if problem:
            raise CheckpointError(f"{who} {str(path)!r}: {key!r} {problem}")
        entry[part][name] = value
    missing = sorted(set(layout["personal"]) - set(entry["personal"])) if layout and entry["personal"] else []
    if missing:  # the turn would load the others only, keeping the previous client's values of these
        raise CheckpointError(
            f"{who} {str(path)!r}: 'personal/{missing[0]}' is missing (a client's personal state holds every"
            " personal parameter)"
        )
    return entry


def _owner(data: bytes) -> int | None:
    """The client a state file's metadata names (``None`` if it names none); ``data`` is a
    complete safetensors file: 8 bytes of header length, then the JSON header."""
    header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")])
    try:
        owner = json.loads((header.get("__metadata__") or {})[METADATA_KEY])[1]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return owner if isinstance(owner, int) and not isinstance(owner, bool) else None


Layout = dict[str, dict[str, "tuple[int, ...] | None"]]
"""``{"personal": name -> shape, "memory": name -> shape}``: where a client's tensors may go
(a shape of ``None``: any shape)."""


def state_layout(personal: StateDict, shared: StateDict, memory_shapes: bool = True) -> Layout:
    """The shapes a client's state may have: its personal parameters, and for the algorithm
    memory (e.g. SCAFFOLD's ``control/<name>``) any shared or personal parameter's name after
    the last ``/``.

    Args:
        personal: The module's personal parameters.
        shared: What the client starts from (the global state, or a strategy's share of it).
        memory_shapes: ``False``: the memory's names are checked but not its shapes (before the
            first turn, where a strategy may give a client a share of another shape, e.g. HetLoRA).
    """
    shapes = {k: tuple(v.shape) for k, v in personal.items()}
    memory = {**{k: tuple(v.shape) for k, v in shared.items()}, **shapes}
    return {"personal": shapes, "memory": memory if memory_shapes else dict.fromkeys(memory)}


def _tensor_problem(part: str, name: str, value: Any, layout: Layout | None) -> str | None:
    if part not in PARTS or not name:
        return f"is not under {' or '.join(f'{p}/' for p in PARTS)}"
    if not value.is_floating_point():
        return f"is {str(value.dtype)[6:]}: a client's state is floating point"
    if layout is not None:
        param = name if part == "personal" else name.rsplit("/", 1)[-1]
        if param not in layout[part]:
            return f"names no {'personal' if part == 'personal' else 'shared or personal'} parameter of the model"
        expected = layout[part][param]
        if expected is not None and tuple(value.shape) != expected:
            return f"has shape {tuple(value.shape)}, the model's {param!r} has {expected}"
    if not bool(torch.isfinite(value).all()):
        return "has NaN or infinite values"
    return None


def is_int(value: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_client_id(value: Any) -> bool:
    """An index's client key: an int (as saved) or its digits (the index read back from JSON)."""
    return (is_int(value) and value >= 0) or (isinstance(value, str) and value.isascii() and value.isdigit())


def check_legacy_entry(cid: Any, entry: Any) -> None:
    """A client's state held in the checkpoint itself (older checkpoints): ``{"personal": {name:
    tensor}, "memory": {name: tensor}}`` of finite floats under an integer client id."""
    where = f"client {cid!r}'s state in the checkpoint"
    if not is_client_id(cid):
        raise CheckpointError(f"{where}: {cid!r} is not a client id")
    if not isinstance(entry, dict) or not set(entry) <= set(PARTS):
        raise CheckpointError(f"{where}: expected a mapping of {' and '.join(PARTS)}, got {entry!r:.80}")
    for part, tensors in entry.items():
        if not isinstance(tensors, dict):
            raise CheckpointError(f"{where}: {part!r} is a {type(tensors).__name__}, expected a mapping")
        for name, value in tensors.items():
            if not isinstance(name, str) or not isinstance(value, torch.Tensor):
                raise CheckpointError(f"{where}: '{part}/{name}' is a {type(value).__name__}, expected a tensor")
            if problem := _tensor_problem(part, name, value, None):
                raise CheckpointError(f"{where}: '{part}/{name}' {problem}")
