"""Where simulated clients keep what they own between rounds.

Each client owns its personal parameters (heads, adapters that never leave it) and its
algorithm memory (e.g. SCAFFOLD's control variate ``c_i``). Both live on the CPU; past
``max_memory_bytes`` the least recently used clients are written to ``offload_dir`` and read
back on their next turn. The backbone is never here: it stays in the module, shared.
"""

from __future__ import annotations

import os
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from lightning_fed.state import StateDict, clone_state, state_nbytes


class ClientStateStore:
    """Per-client personal state and algorithm memory, on the CPU (or disk past a budget).

    Args:
        max_memory_bytes: Budget for states held in memory; ``None`` means unlimited.
        offload_dir: Folder for states past the budget (default: a temporary folder).
    """

    def __init__(self, max_memory_bytes: int | None = None, offload_dir: str | None = None) -> None:
        self.max_memory_bytes = max_memory_bytes
        self._offload_dir = offload_dir
        self._mem: OrderedDict[int, dict[str, StateDict]] = OrderedDict()
        self._on_disk: set[int] = set()

    # ---------------------------------------------------------------------------- access
    def get(self, client_id: int) -> dict[str, StateDict]:
        """``{"personal": ..., "memory": ...}`` of a client (empty dicts for a new client)."""
        if client_id in self._on_disk:
            entry = torch.load(self._path(client_id), weights_only=True)
            self._on_disk.discard(client_id)
            os.remove(self._path(client_id))
            self._mem[client_id] = entry
            self._evict(keep=client_id)
        entry = self._mem.setdefault(client_id, {"personal": {}, "memory": {}})
        self._mem.move_to_end(client_id)
        return entry

    def put(self, client_id: int, personal: StateDict, memory: StateDict) -> None:
        """Store a client's state after its turn (copied to the CPU)."""
        self._on_disk.discard(client_id)
        self._mem[client_id] = {"personal": clone_state(personal), "memory": clone_state(memory)}
        self._mem.move_to_end(client_id)
        self._evict(keep=client_id)

    def __contains__(self, client_id: int) -> bool:
        return client_id in self._mem or client_id in self._on_disk

    @property
    def nbytes_in_memory(self) -> int:
        return sum(state_nbytes(e["personal"]) + state_nbytes(e["memory"]) for e in self._mem.values())

    # ---------------------------------------------------------------------------- offload
    def _path(self, client_id: int) -> Path:
        if self._offload_dir is None:
            self._offload_dir = tempfile.mkdtemp(prefix="lightning_fed_clients_")
        Path(self._offload_dir).mkdir(parents=True, exist_ok=True)
        return Path(self._offload_dir) / f"client_{client_id}.pt"

    def _evict(self, keep: int) -> None:
        if self.max_memory_bytes is None:
            return
        while self.nbytes_in_memory > self.max_memory_bytes and len(self._mem) > 1:
            cid = next(c for c in self._mem if c != keep)
            torch.save(self._mem.pop(cid), self._path(cid))
            self._on_disk.add(cid)

    # ---------------------------------------------------------------------------- resume
    def state_dict(self) -> dict[int, Any]:
        """Every client's state, from memory and disk alike (for the checkpoint)."""
        out = {cid: entry for cid, entry in self._mem.items()}
        for cid in self._on_disk:
            out[cid] = torch.load(self._path(cid), weights_only=True)
        return out

    def load_state_dict(self, state: dict[int, Any]) -> None:
        self._mem.clear()
        for cid in list(self._on_disk):
            os.remove(self._path(cid))
        self._on_disk.clear()
        for cid, entry in state.items():
            self.put(int(cid), entry.get("personal", {}), entry.get("memory", {}))
