"""Where simulated clients keep what they own between rounds.

Each client owns its personal parameters (heads, adapters that never leave it) and its
algorithm memory (e.g. SCAFFOLD's control variate ``c_i``). A client's state is held in
memory (an LRU of at most ``max_memory_bytes``, with a running byte count) and, once it has
to leave memory or a checkpoint needs it, in one safetensors file per client and version in
the run's ``client_states/`` folder. The backbone is never here: it stays in the module, shared.

A file is named after its content (``client_<k>-<digest>.safetensors``), so a name never
holds two different states: a file a checkpoint references cannot be overwritten by a later
round. A state is written only when it changed since its last file (dirty tracking), once,
atomically. A checkpoint holds :meth:`ClientStateStore.index` (client -> file name and size,
plus the folder), not the states. Files no completed checkpoint references are deleted
(:meth:`ClientStateStore.index` keeps the versions of the current and the previous index:
the previous checkpoint is the last one known to be complete while the current is written).
Clients a checkpoint references are read lazily, on their next turn or evaluation (a resume
checks every file first: :meth:`ClientStateStore.check_files`). The file format and its checks
are :mod:`~lightning_fed.federation.client_files`.
"""

from __future__ import annotations

import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lightning_fed.errors import CheckpointError
from lightning_fed.federation.checkpoint_io import atomic_write_bytes
from lightning_fed.federation.client_files import (  # noqa: F401 - encode_entry, Layout: this module's API too
    FILE_NAME,
    INDEX_FORMAT,
    PARTS,
    Entry,
    Layout,
    check_legacy_entry,
    empty_entry,
    encode_entry,
    is_client_id,
    is_int,
    read_entry,
    state_layout,
)
from lightning_fed.state import StateDict, clone_state, state_nbytes

STATES_DIR = "client_states"
"""The folder of a run folder that holds its clients' state files."""


def _entry_nbytes(entry: Entry) -> int:
    return state_nbytes(entry["personal"]) + state_nbytes(entry["memory"])


class ClientStateStore:
    """Per-client personal state and algorithm memory: an LRU in memory, files in a folder.

    Args:
        max_memory_bytes: Budget for states held in memory; ``None`` means unlimited. The
            client in use is always kept, even when it alone is over the budget.
        offload_dir: Where the state files go (the loop uses ``<run>/client_states``; default: a
            temporary folder, created on the first write).
        run: What the folder belongs to (the run folder): files a loaded checkpoint references
            are this store's to delete once unreferenced only if that checkpoint was written by
            the same run; another run's files are only read.

    Attributes:
        bytes_written / files_written: State bytes and files this store has written so far.
    """

    def __init__(
        self, max_memory_bytes: int | None = None, offload_dir: str | Path | None = None, run: str = ""
    ) -> None:
        self.max_memory_bytes = max_memory_bytes
        self._folder = Path(offload_dir).absolute() if offload_dir is not None else None
        self.run = run
        self._mem: OrderedDict[int, Entry] = OrderedDict()
        self._sizes: dict[int, int] = {}  # bytes of each entry in memory
        self._nbytes = 0  # running sum of _sizes
        self._files: dict[int, Path] = {}  # the newest file of each client
        self._file_nbytes: dict[int, int] = {}  # and its size on disk
        self._dirty: set[int] = set()  # in memory and newer than its file (or without one)
        self._owned: set[Path] = set()  # files this store may delete
        self._protected: list[set[Path]] = []  # files of the last two indexes (checkpoints)
        self.bytes_written = self.files_written = 0
        self.layout: Layout | None = None  # checks the states read from files (see get)

    # ---------------------------------------------------------------------------- where
    @property
    def folder(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="lightning_fed_clients_"))
        return self._folder

    def attach(self, folder: str | Path, run: str = "") -> None:
        """Write state files to ``folder`` from now on (the run's ``client_states/``)."""
        self._folder, self.run = Path(folder).absolute(), run

    # ---------------------------------------------------------------------------- access
    def get(self, client_id: int, layout: Layout | None = None) -> Entry:
        """``{"personal": ..., "memory": ...}`` of a client (empty dicts for a new client).

        The dicts are the caller's: adding or replacing keys in them changes nothing here
        (:meth:`put` does); the tensors are the stored ones and must not be changed in place.
        ``layout`` (:func:`state_layout`), once given, checks every state read from a file from
        then on (a checkpoint's files are input).
        """
        if layout is not None:
            self.layout = layout
        if client_id not in self._mem:
            if client_id not in self._files:
                return empty_entry()
            self._insert(client_id, read_entry(self._files[client_id], client_id, self.layout))
            self._evict(keep=client_id)
        self._mem.move_to_end(client_id)
        entry = self._mem[client_id]
        return {part: dict(entry[part]) for part in PARTS}

    def put(self, client_id: int, personal: StateDict, memory: StateDict) -> None:
        """Store a client's state after its turn (copied to the CPU); it is written out later, once.

        An empty state (no personal parameters, no memory: e.g. FedAvg) is not kept: no entry, no file.
        """
        if not personal and not memory:
            self._forget(client_id)
            return
        self._insert(client_id, {"personal": clone_state(personal), "memory": clone_state(memory)})
        self._dirty.add(client_id)
        self._evict(keep=client_id)

    def __contains__(self, client_id: int) -> bool:
        return client_id in self._mem or client_id in self._files

    def __len__(self) -> int:
        return len(self._mem.keys() | self._files.keys())

    def client_ids(self) -> list[int]:
        """Every client with a stored state, in ascending order."""
        return sorted(self._mem.keys() | self._files.keys())

    def items(self) -> Iterator[tuple[int, Entry]]:
        """Every client's state, read from disk where it is not in memory (leaves the LRU as it is)."""
        for cid in self.client_ids():
            yield cid, (self._mem[cid] if cid in self._mem else read_entry(self._files[cid], cid, self.layout))

    def state_dict(self) -> dict[int, Entry]:
        """Every client's full state (all of it in memory at once: for tests and small runs; a
        checkpoint holds :meth:`index` instead)."""
        return dict(self.items())

    @property
    def nbytes_in_memory(self) -> int:
        """Bytes of the states held in memory (kept as a running count)."""
        return self._nbytes

    # ---------------------------------------------------------------------------- memory
    def _insert(self, client_id: int, entry: Entry) -> None:
        self._nbytes -= self._sizes.pop(client_id, 0)
        self._mem[client_id] = entry
        self._mem.move_to_end(client_id)
        self._sizes[client_id] = size = _entry_nbytes(entry)
        self._nbytes += size

    def _forget(self, client_id: int) -> None:
        """Drop a client's state (in memory and its newest file, once no checkpoint references it)."""
        if client_id in self._mem:
            del self._mem[client_id]
            self._nbytes -= self._sizes.pop(client_id)
        self._dirty.discard(client_id)
        self._file_nbytes.pop(client_id, None)
        if (old := self._files.pop(client_id, None)) is not None:
            self._delete_unreferenced({old})

    def _evict(self, keep: int) -> None:
        """Least recently used first, until the budget holds; a dirty state is written first."""
        if self.max_memory_bytes is None:
            return
        while self._nbytes > self.max_memory_bytes and len(self._mem) > 1:
            cid = next(iter(self._mem))
            if cid == keep:  # the client in use is the oldest: take the next one
                self._mem.move_to_end(cid)
                continue
            if cid in self._dirty:
                self._write(cid)
            del self._mem[cid]
            self._nbytes -= self._sizes.pop(cid)

    # ---------------------------------------------------------------------------- files
    def _write(self, client_id: int) -> None:
        name, data = encode_entry(client_id, self._mem[client_id], self.run)
        path = self.folder / name
        if not path.is_file():  # same name, same run and content: written before (atomically, so whole)
            atomic_write_bytes(path, data)
            self.bytes_written += len(data)
            self.files_written += 1
        self._owned.add(path)
        old = self._files.get(client_id)
        self._files[client_id], self._file_nbytes[client_id] = path, len(data)
        self._dirty.discard(client_id)
        if old is not None and old != path:
            self._delete_unreferenced({old})

    def _delete_unreferenced(self, candidates: set[Path]) -> None:
        keep = set(self._files.values()).union(*self._protected)
        for path in candidates & self._owned - keep:
            path.unlink(missing_ok=True)
            self._owned.discard(path)

    def flush(self) -> None:
        """Write every state that changed since its last file (each once)."""
        for cid in sorted(self._dirty):
            self._write(cid)

    # ---------------------------------------------------------------------------- checkpoints
    def index(self) -> dict[str, Any]:
        """What a checkpoint holds of the clients: ``{"format", "folder", "run", "files": {client:
        {"file", "nbytes"}}}`` (a file outside ``folder`` by its absolute path). Writes the states
        that changed first, then deletes the files neither this index nor the previous one references.
        """
        self.flush()
        files = {
            cid: {"file": path.name if path.parent == self.folder else str(path), "nbytes": self._file_nbytes[cid]}
            for cid, path in sorted(self._files.items())
        }
        self._protected = [*self._protected[-1:], set(self._files.values())]
        self._delete_unreferenced(set(self._owned))
        return {"format": INDEX_FORMAT, "folder": str(self.folder), "run": self.run, "files": files}

    def load_state_dict(
        self, state: dict[Any, Any], folder: str | Path | None = None, run: str | Path | None = None
    ) -> None:
        """Restore from a checkpoint's :meth:`index` (nothing is read until a client is used), or
        from a mapping ``{client: {"personal", "memory"}}`` (older checkpoints, a Flower client).

        Args:
            state: The index or the mapping.
            folder: Where to look for the files if the index's folder is gone (the checkpoint was
                copied elsewhere with its run folder).
            run: The run folder holding the checkpoint
                (:func:`~lightning_fed.federation.version_folder.checkpoint_run`): when the index's
                folder is its run's ``client_states/``, the files are read from ``run``'s, never from the
                folder the index names. A copy of a run folder resumes from its own states, not the
                original's, which a resume of the original may have replaced since (issue 41).

        Raises:
            CheckpointError: One line naming the first missing file.
        """
        self._mem.clear()
        self._sizes.clear()
        self._nbytes = 0
        self._files.clear()
        self._file_nbytes.clear()
        self._dirty.clear()
        self._protected = []
        if not (isinstance(state.get("files"), dict) and "folder" in state):
            for cid, entry in state.items():
                check_legacy_entry(cid, entry)
                self.put(int(cid), entry.get("personal", {}), entry.get("memory", {}))
            return
        if not isinstance(state["folder"], str):
            raise CheckpointError(
                f"the checkpoint's client state index: 'folder' is {state['folder']!r}, expected a path"
            )
        base = Path(state["folder"])
        if run is not None and isinstance(state.get("run"), str) and base == Path(state["run"]) / STATES_DIR:
            base = Path(run) / STATES_DIR
        elif not base.is_dir() and folder is not None and Path(folder).is_dir():
            base = Path(folder)
        for cid, ref in state["files"].items():
            if not (
                is_client_id(cid)
                and isinstance(ref, dict)
                and isinstance(ref.get("file"), str)
                and is_int(ref.get("nbytes"))
            ):
                raise CheckpointError(
                    f"the checkpoint's client state index: client {cid!r} has {ref!r}, expected"
                    " {'file': <name>, 'nbytes': <size>}"
                )
            path = base / ref["file"]  # an absolute ``file`` stays as it is
            match = FILE_NAME.fullmatch(path.name)
            if match is None or int(match.group(1)) != int(cid):
                raise CheckpointError(
                    f"client {cid}'s state file {str(path)!r} is not named client_{cid}-<digest>.safetensors:"
                    " the checkpoint references a file whose content cannot be checked"
                )
            if not path.is_file():
                raise CheckpointError(
                    f"client {cid}'s state file {str(path)!r} is missing: the checkpoint references it;"
                    " copy the run's client_states/ folder with its checkpoints/ (same layout)"
                )
            if path.stat().st_size != ref["nbytes"]:
                raise CheckpointError(
                    f"client {cid}'s state file {str(path)!r} has {path.stat().st_size} bytes, the checkpoint"
                    f" says {ref['nbytes']}: it is not the file the checkpoint references"
                )
            self._files[int(cid)], self._file_nbytes[int(cid)] = path.absolute(), int(ref["nbytes"])
        if self.run and state.get("run") == self.run and base.absolute() == self.folder:
            self._owned |= {p for p in self._files.values() if p.parent == self.folder}
        self._protected = [set(self._files.values())]

    def check_files(self, layout: Layout | None = None) -> None:
        """Read every state file this store references (after :meth:`load_state_dict`) and check it
        as :func:`read_entry` does, keeping none in memory: a resumed run finds a bad file before
        it writes anything, not at that client's first turn.

        Raises:
            CheckpointError: One line naming the first bad file.
        """
        for cid, path in sorted(self._files.items()):
            read_entry(path, cid, layout)
