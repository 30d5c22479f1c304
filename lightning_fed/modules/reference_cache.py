"""The DPO reference log-probabilities, computed once per example and cached.

DPO's reference ``pi_ref`` is fixed for a run (the backbone with its adapters disabled), so
``(log pi_ref(y_w|x), log pi_ref(y_l|x))`` of an example never changes: recomputing them on
every step costs a third forward (29% of a SmolLM2-135M DPO step, issue #13). Like TRL's
``precompute_ref_log_probs``, this computes them once; unlike TRL it needs no extra column in
the dataset and no pass before training: an example is keyed by its *content* (the token ids,
attention mask and labels of its chosen and rejected rows, trailing padding stripped), and the
first time an example is seen is when its reference is computed, inside the same training or
validation step and so under the same precision (autocast) as without the cache.

A value is a function of its key alone: a new example is computed *on its own*, its chosen and
rejected rows cut to its own longest attended length (:func:`example_rows`), never inside the
batch it arrived in. A float32 forward is not a function of the example alone: the padded width
of the batch changes the attention's reductions (a row padded from 255 to 258 tokens moves a
tiny GPT-2's logits by ~2e-7 and its summed log-prob by an ulp, issue 23), so a value computed
in its first batch would depend on which batch that was. Computed alone, the cache is exact
under shuffling, client sampling, batch composition, evaluation order, transport (the in-process
loop and a Flower client see an example first in different batches) and resume. The cost is one
forward per new example instead of one per batch of new examples, once per example and run.

Values live in a dict up to ``max_memory_bytes``; past it they are spilled to an SQLite file
(``reference_logps.sqlite``) in ``spill_dir``, by default a fresh temporary directory (under
``$TMPDIR``) removed when the cache is closed or the process exits.

The cache is part of the checkpoint (:meth:`ReferenceCache.state_dict`, 32 bytes an example,
saved by :class:`~lightning_fed.modules.dpo.DPOModule`), so a resumed run does not recompute
what the run already computed (the values it would recompute are the same ones).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import sys
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor

from lightning_fed.federation.cache_state import KEY_BYTES, SERVED_DTYPES, cache_state_problem
from lightning_fed.modules.preference import PAIR_FIELDS

__all__ = ["KEY_BYTES", "SERVED_DTYPES", "ReferenceCache", "cache_state_problem"]

SIDES = ("chosen", "rejected")
# One in-memory entry: a 16-byte key object, a tuple of two floats and the dict slot.
ENTRY_BYTES = sys.getsizeof(b"\0" * 16) + sys.getsizeof((0.0, 0.0)) + 2 * sys.getsizeof(0.0) + 3 * 8
DEFAULT_MEMORY_BYTES = 64 * 2**20


def precision_tag(device: torch.device) -> bytes:
    """The autocast state on ``device``: part of every key, so a value computed under one
    precision is never served under another."""
    kind = device.type
    if torch.is_autocast_enabled(kind):
        return f"{kind}:autocast:{torch.get_autocast_dtype(kind)}".encode()
    return f"{kind}:full".encode()


def attended_lengths(batch: Mapping[str, Tensor]) -> list[dict[str, int]]:
    """Per example and side, one past the last attended position (0 when nothing is attended)."""
    lengths: list[dict[str, int]] = []
    masks = {side: batch[f"{side}_attention_mask"].detach().cpu() for side in SIDES}
    for i in range(masks["chosen"].shape[0]):
        row = {}
        for side in SIDES:
            attended = masks[side][i].nonzero()
            row[side] = int(attended[-1]) + 1 if len(attended) else 0
        lengths.append(row)
    return lengths


def example_keys(batch: Mapping[str, Tensor]) -> list[bytes]:
    """One 128-bit BLAKE2b digest per example of a preference batch.

    The digest covers the chosen and rejected ``input_ids``, ``attention_mask`` and
    ``labels`` up to the last attended position (trailing padding does not change a causal
    LM's log-probabilities beyond float rounding; everything before it, holes in the mask
    included, does) and the current autocast state.
    """
    rows = {f"{side}_{f}": batch[f"{side}_{f}"].detach().cpu() for side in SIDES for f in PAIR_FIELDS}
    tag = precision_tag(batch["chosen_input_ids"].device)
    keys = []
    for i, lengths in enumerate(attended_lengths(batch)):
        h = hashlib.blake2b(tag, digest_size=KEY_BYTES)
        for side in SIDES:
            n = lengths[side]
            h.update(n.to_bytes(8, "little"))
            for f in PAIR_FIELDS:
                h.update(rows[f"{side}_{f}"][i, :n].to(torch.int64).numpy().tobytes())
        keys.append(h.digest())
    return keys


def example_rows(batch: Mapping[str, Tensor], row: int, lengths: Mapping[str, int]) -> dict[str, Tensor]:
    """Example ``row`` of ``batch`` alone: a batch of one, both sides cut to the example's own
    longest attended length (``lengths``, from :func:`attended_lengths`; at least 1).

    Its shape and content depend on the example only (what :func:`example_keys` covers, and the
    collator's padding within it), so a forward over it gives the same floats whatever batch the
    example came in.
    """
    width = max(1, *lengths.values())
    return {f"{side}_{f}": batch[f"{side}_{f}"][row : row + 1, :width] for side in SIDES for f in PAIR_FIELDS}


class ReferenceCache:
    """``key -> (log pi_ref(y_w|x), log pi_ref(y_l|x))`` in memory, spilled to disk past a budget.

    Values are stored as Python floats (IEEE doubles), which hold a float32 or bfloat16 value
    exactly, and come back in the dtype they were computed in: a cached value is bit-for-bit
    the one computed when the example was first seen.

    Args:
        max_memory_bytes: Budget of the in-memory dict (``ENTRY_BYTES``, about 180 B per
            example). When it is exceeded every in-memory entry moves to the SQLite file.
        spill_dir: Folder of the SQLite file; default: a new temporary directory, deleted by
            :meth:`close` or at exit. A given folder is kept, the file in it deleted.
    """

    def __init__(self, max_memory_bytes: int = DEFAULT_MEMORY_BYTES, spill_dir: str | Path | None = None) -> None:
        if not max_memory_bytes >= 0:
            raise ValueError(f"model.reference_cache_bytes must be >= 0, got {max_memory_bytes}")
        self.max_memory_bytes = int(max_memory_bytes)
        self.spill_dir = None if spill_dir is None else Path(spill_dir)
        self._reset()

    def _reset(self) -> None:
        self._memory: dict[bytes, tuple[float, float]] = {}
        self._db: sqlite3.Connection | None = None
        self._db_path: Path | None = None
        self._on_disk = 0
        self._dtype: torch.dtype | None = None
        self._finalizer: weakref.finalize | None = None
        self.hits = self.misses = 0

    # ---------------------------------------------------------------- copy and pickle
    def __getstate__(self) -> dict[str, object]:
        # A copy of a module starts with an empty cache: it cannot share the SQLite
        # connection, and whoever copies a module may go on to change its backbone.
        return {"max_memory_bytes": self.max_memory_bytes, "spill_dir": self.spill_dir}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.max_memory_bytes, self.spill_dir = state["max_memory_bytes"], state["spill_dir"]
        self._reset()

    # ----------------------------------------------------------------------- storage
    def __len__(self) -> int:
        return len(self._memory) + self._on_disk

    @property
    def memory_bytes(self) -> int:
        """Approximate bytes held in memory."""
        return len(self._memory) * ENTRY_BYTES

    @property
    def db_path(self) -> Path | None:
        """The SQLite file once something was spilled, else ``None``."""
        return self._db_path

    def _open_db(self) -> sqlite3.Connection:
        if self._db is None:
            if self.spill_dir is None:
                folder = Path(tempfile.mkdtemp(prefix="lightning-fed-reference-"))
                self._db_path, remove = folder / "reference_logps.sqlite", folder
            else:  # several processes (DDP ranks) or modules may share the folder: one file each
                self.spill_dir.mkdir(parents=True, exist_ok=True)
                self._db_path = self.spill_dir / f"reference_logps_{os.getpid()}_{id(self):x}.sqlite"
                remove = self._db_path
            self._db = sqlite3.connect(self._db_path, check_same_thread=False)
            # Only the training thread uses it (check_same_thread=False lets a simulation engine
            # run a client in another thread). A crash costs only a recomputation: no journal, no fsync.
            self._db.execute("PRAGMA journal_mode=OFF")
            self._db.execute("PRAGMA synchronous=OFF")
            self._db.execute("CREATE TABLE IF NOT EXISTS ref (key BLOB PRIMARY KEY, chosen REAL, rejected REAL)")
            self._finalizer = weakref.finalize(self, _close_db, self._db, remove)
        return self._db

    def _spill(self) -> None:
        db = self._open_db()
        db.executemany("INSERT OR REPLACE INTO ref VALUES (?, ?, ?)", ((k, c, r) for k, (c, r) in self._memory.items()))
        db.commit()
        self._on_disk = db.execute("SELECT COUNT(*) FROM ref").fetchone()[0]
        self._memory.clear()

    def get_many(self, keys: Sequence[bytes]) -> list[tuple[float, float] | None]:
        """The cached pair of each key, or ``None`` where it was never stored."""
        found: list[tuple[float, float] | None] = [self._memory.get(k) for k in keys]
        missing = [k for k, v in zip(keys, found) if v is None]
        if missing and self._db is not None:
            marks = ",".join("?" * len(missing))
            rows = dict(
                (k, (c, r))
                for k, c, r in self._db.execute(
                    f"SELECT key, chosen, rejected FROM ref WHERE key IN ({marks})", missing
                )
            )
            found = [v if v is not None else rows.get(k) for k, v in zip(keys, found)]
        return found

    def put_many(self, keys: Sequence[bytes], chosen: Tensor, rejected: Tensor) -> None:
        """Store ``(chosen[i], rejected[i])`` under ``keys[i]``; spill past the memory budget."""
        if self._dtype is None:
            self._dtype = chosen.dtype
        for key, c, r in zip(keys, chosen.detach().tolist(), rejected.detach().tolist()):
            self._memory[key] = (c, r)
        if self.memory_bytes > self.max_memory_bytes:
            self._spill()

    # ----------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, object]:
        """Every entry (memory and spill file) as tensors: ``keys`` uint8 (N, 16), ``values``
        float64 (N, 2) (chosen, rejected), and the dtype they are served in."""
        items = list(self._memory.items())
        if self._db is not None:
            items += [(k, (c, r)) for k, c, r in self._db.execute("SELECT key, chosen, rejected FROM ref")]
        joined = bytearray(b"".join(k for k, _ in items))  # frombuffer refuses an empty buffer (an emptied cache)
        keys = torch.frombuffer(joined, dtype=torch.uint8) if joined else torch.zeros(0, dtype=torch.uint8)
        keys = keys.reshape(-1, KEY_BYTES)
        values = torch.tensor([v for _, v in items], dtype=torch.float64).reshape(-1, 2)
        return {"keys": keys, "values": values, "dtype": "" if self._dtype is None else str(self._dtype)[6:]}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Replace the entries with those of :meth:`state_dict` (checked: a checkpoint is input).

        Raises:
            ValueError: ``state`` is not what :meth:`state_dict` writes (names the field).
        """
        problem = cache_state_problem(state)
        if problem:
            raise ValueError(problem)
        keys, values, dtype = state["keys"], state["values"], state["dtype"]
        self.close()
        self._dtype = getattr(torch, dtype) if dtype else None
        raw = keys.contiguous().numpy().tobytes()
        self._memory = {raw[i * KEY_BYTES : (i + 1) * KEY_BYTES]: (c, r) for i, (c, r) in enumerate(values.tolist())}
        if self.memory_bytes > self.max_memory_bytes:
            self._spill()

    def close(self) -> None:
        """Drop every entry and delete the spill file (the temporary directory, if it made one)."""
        if self._finalizer is not None:
            self._finalizer()
        self._reset()

    # ----------------------------------------------------------------------- lookup
    def log_probs(
        self, batch: Mapping[str, Tensor], compute: Callable[[Mapping[str, Tensor]], tuple[Tensor, Tensor]]
    ) -> tuple[Tensor, Tensor]:
        """``(log pi_ref(y_w|x), log pi_ref(y_l|x))`` of every example of ``batch``.

        ``compute`` (the reference forward, under ``no_grad``) runs on the examples never seen
        before only, each on its own (:func:`example_rows`), so that a value does not depend on
        the batch the example first came in (see the module docstring).
        """
        keys = example_keys(batch)
        found = self.get_many(keys)
        missing = [i for i, v in enumerate(found) if v is None]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing:
            lengths = attended_lengths(batch)
            pairs = [compute(example_rows(batch, i, lengths[i])) for i in missing]
            new_chosen, new_rejected = torch.cat([c for c, _ in pairs]), torch.cat([r for _, r in pairs])
            self.put_many([keys[i] for i in missing], new_chosen, new_rejected)
            for i, c, r in zip(missing, new_chosen.tolist(), new_rejected.tolist()):
                found[i] = (c, r)
        values = torch.tensor(found, dtype=self._dtype, device=batch["chosen_input_ids"].device)
        chosen, rejected = values.unbind(1)
        return chosen, rejected


def _close_db(db: sqlite3.Connection, remove: Path) -> None:
    db.close()
    if remove.is_dir():
        shutil.rmtree(remove, ignore_errors=True)
    else:
        remove.unlink(missing_ok=True)
