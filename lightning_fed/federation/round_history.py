"""The run's round history on disk: one JSON line per round, per-client metrics in Parquet.

In the run folder (the logger's version folder):

- ``rounds.jsonl``: one line per round, appended (flushed and fsynced) when the round is
  aggregated and rewritten once when its evaluation is in: the round's clients, bytes and
  seconds, and each metric's distribution over clients (``train_stats``; ``val``, which also
  holds the example-weighted mean). These lines are ``summary.json``'s ``rounds``.
- ``client_metrics/<stage>/round_<r>.parquet``, ``stage`` ``train`` (the trained clients) or
  ``val`` (the evaluated clients; round 0 is the evaluation before round 1): one row per client,
  columns ``round``, ``client``, ``stage``, ``num_examples`` and one per metric.
  :func:`~lightning_fed.federation.client_metrics.read_client_metrics` reads a stage's rounds back
  as one table (:mod:`~lightning_fed.federation.client_metrics`).

:class:`RoundHistory` is the list-like view that the loop, the hooks, the Flower server and the
tests read (``len(history)``, ``history[-1]``, ``history[i]``, iteration; each record as before,
with the per-client ``train`` and ``val_clients``). It keeps the round count and the last
round's record in memory and reads older rounds back from the files, so neither memory nor
checkpoints grow with rounds x clients: a checkpoint stores the count and the folder
(:meth:`RoundHistory.state_dict`). A resumed run cuts the files back to the checkpoint's count,
dropping rounds recorded by a run killed after them but before their checkpoint, so that its
files equal those of a run that was never interrupted; resumed into another folder, it first
copies the checkpoint's rounds there. The cut ``rounds.jsonl`` is a new file (written beside and
renamed over the old one) before this run appends to it: a folder copied with hard links
(``cp -al``) shares its files with the original, whose records a cut or an append in place would
change too (red team 16 B07); the other files a resume changes are replaced the same way.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn

from lightning_fed.federation.client_metrics import (
    PER_CLIENT,
    ROUNDS_FILE,
    client_file,
    fsync_file,
    read_client_file,
    round_files,
    write_client_file,
)
from lightning_fed.federation.run_folder import EarlierFiles, replace_bytes

SAMPLE_KEYS = ("clients", "aggregated", "failed", "rejected")
"""The keys of a round record that name its clients: kept in memory for the round's own use, never
written for a private round (``sample: withheld``): its client sample is secret."""


def _line(record: Mapping[str, Any]) -> dict[str, Any]:
    """A round record without its per-client metrics (nor, private, its clients): its line in ``rounds.jsonl``."""
    drop = set(PER_CLIENT.values()) | (set(SAMPLE_KEYS) if record.get("sample") == "withheld" else set())
    return {k: v for k, v in record.items() if k not in drop}


def _public(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` as a checkpoint may hold it: without its clients when private."""
    if record.get("sample") != "withheld":
        return record
    return {k: v for k, v in record.items() if k not in SAMPLE_KEYS}


def _encode(line: Mapping[str, Any]) -> bytes:
    return (json.dumps(line, default=str) + "\n").encode()


def _line_offsets(path: Path, n: int) -> list[int]:
    """Where the first ``n`` complete lines of ``path`` start, and where the last of them ends."""
    offsets = [0]
    with open(path, "rb") as f:
        for line in f:
            if len(offsets) > n or not line.endswith(b"\n"):
                break
            offsets.append(offsets[-1] + len(line))
    return offsets


class RoundHistory(Sequence):
    """The run's round records (see the module docstring).

    Until it is attached to a run folder (:meth:`attach`), and for good when there is none (a
    bare ``ServerRound`` in a unit test), the records stay in memory.
    """

    def __init__(self) -> None:
        self._count = 0
        self._records: list[dict[str, Any]] = []  # records not in files (yet)
        self._examples: list[dict[str, dict[int, int]]] = []  # their clients' example counts per stage
        self._dir: Path | None = None  # the run folder the files are written to, once attached
        self._source: Path | None = None  # a restored checkpoint's folder, until attached
        self._writer = True  # only the global-zero process writes
        self._last: dict[str, Any] | None = None  # the last round's full record, once in the files
        self._last_offset = 0  # where its line starts in rounds.jsonl
        self._guard: EarlierFiles | None = None  # an earlier run's files in the folder wait for a round
        self._reading: Path | None = None  # where the records are read until the folder is prepared

    @property
    def folder(self) -> Path | None:
        """The folder holding the records' files (``None``: in memory only)."""
        return self._reading or self._dir or self._source

    @property
    def guard(self) -> EarlierFiles | None:
        """What waits for this run's first round in its folder (``None``: nothing is guarded)."""
        return self._guard

    @property
    def attached(self) -> bool:
        return self._dir is not None

    # ------------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if not -self._count <= index < self._count:
            raise IndexError(f"round record {index} out of range: {self._count} rounds recorded")
        index %= self._count
        in_files = self._count - len(self._records)
        if index >= in_files:
            return self._records[index - in_files]
        if index == self._count - 1 and self._last is not None:
            return self._last
        line = next(itertools.islice(self._file_lines(in_files), index, None), None)
        if line is None:
            raise IndexError(f"round {index + 1} is missing from {self.folder / ROUNDS_FILE}")
        return self._full(line)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i, line in enumerate(self._file_lines(self._count - len(self._records))):
            yield self._last if i == self._count - 1 and self._last is not None else self._full(line)
        yield from self._records

    def lines(self) -> Iterator[dict[str, Any]]:
        """Every round's record without its per-client metrics (the lines of ``rounds.jsonl``)."""
        yield from self._file_lines(self._count - len(self._records))
        yield from map(_line, self._records)

    def _file_lines(self, n: int) -> Iterator[dict[str, Any]]:
        path = self.folder / ROUNDS_FILE if self.folder is not None else None
        if n <= 0 or path is None or not path.is_file():
            return
        with open(path, "rb") as f:
            for raw in itertools.islice(f, n):
                yield json.loads(raw)

    def _full(self, line: dict[str, Any]) -> dict[str, Any]:
        """A line with its per-client metrics read back: the record as it was made."""
        record = dict(line)
        if isinstance(record.get("rejected"), dict):  # JSON made the client ids strings
            record["rejected"] = {int(k): v for k, v in record["rejected"].items()}
        for stage, key in PER_CLIENT.items():
            if stage == "val" and "val" not in line:
                continue
            path = client_file(self.folder, stage, line["round"])
            record[key] = read_client_file(path) if path.is_file() else {}
        return record

    def read_from(self, run_dir: Path) -> None:
        """Read a restored checkpoint's records from ``run_dir``, the run folder holding the checkpoint
        (:func:`~lightning_fed.federation.version_folder.checkpoint_run`), not from the folder the
        checkpoint names: a copy of a run folder resumes from its own records (issue 41)."""
        if self._source is not None and self._dir is None:
            self._source = Path(run_dir)

    # ------------------------------------------------------------------------ writing
    def attach(self, run_dir: Path | None, writer: bool = True, guard: EarlierFiles | None = None) -> None:
        """Keep the records in ``run_dir`` from now on (the first call decides; later ones do nothing).

        A new run starts the files afresh; a resumed one cuts them back to the checkpoint's
        count (copying them from the checkpoint's folder if that is another one). Records
        made before (in memory) are written out. With ``guard``, files an earlier run left in
        ``run_dir`` are cut, replaced or deleted only once this run appends its first round
        (:mod:`~lightning_fed.federation.run_folder`): a run that fails before keeps them.
        """
        if self._dir is not None:
            return
        run_dir = Path(run_dir) if run_dir is not None else self._source
        if run_dir is None:
            return
        pending, examples = self._records, self._examples
        self._records, self._examples = [], []
        self._count -= len(pending)
        self._dir, self._writer, self._guard = run_dir, writer, guard
        if writer:
            n, source = self._count, self._source
            if guard is not None and not guard.committed and guard.holds_earlier(run_dir):
                self._reading = source  # the records stay readable where they are until then
                guard.write(run_dir, lambda: self._prepare(n, source))
            else:
                self._prepare(n, source)
        self._source = None
        for record, counts in zip(pending, examples):
            self._count += 1
            self._last = record
            self._persist(record, counts)

    def _drop(self, path: Path) -> None:
        """Delete ``path``: a file of an earlier run (one this run wrote since is kept)."""
        if self._guard is None or self._guard.is_earlier(path):
            path.unlink(missing_ok=True)

    def _prepare(self, n: int, source: Path | None) -> None:
        """Make the folder's files hold exactly the first ``n`` rounds (of ``source``'s, if any)."""
        self._reading = None
        path = self._dir / ROUNDS_FILE
        src = source / ROUNDS_FILE if source is not None else path
        copy = source is not None and source.resolve() != self._dir.resolve() and src.is_file()
        if source is None or copy:  # nothing of another run in this folder is kept
            self._drop(path)
            for stage in PER_CLIENT:
                for _, p in round_files(self._dir, stage):
                    self._drop(p)
        if source is None:
            self._last_offset = 0
            return
        if copy:  # resumed into another folder: the checkpoint's rounds come along
            offsets = _line_offsets(src, n)
            with open(src, "rb") as f:
                path.write_bytes(f.read(offsets[-1]))
            for stage in PER_CLIENT:
                for r, p in round_files(source, stage):
                    if r <= n:
                        client_file(self._dir, stage, r).parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(p, client_file(self._dir, stage, r))
        else:  # resumed in place (or the folder was moved): drop what was recorded after the checkpoint
            src = path
            offsets = _line_offsets(path, n) if path.is_file() else [0]
            if path.is_file():  # a new file, not cut in place: a hard-linked copy shares it (cp -al)
                with open(path, "rb") as f:
                    kept = f.read(offsets[-1])
                replace_bytes(path, kept)
            for stage in PER_CLIENT:
                for r, p in round_files(self._dir, stage):
                    if r > n:
                        self._drop(p)
        if path.is_file():
            fsync_file(path)
        if len(offsets) - 1 < n:
            rank_zero_warn(
                f"the checkpoint recorded {n} rounds but only {len(offsets) - 1} were found in"
                f" {src}: the round history of this run lacks the others"
            )
        self._last_offset = offsets[-2] if len(offsets) > 1 else 0

    def append(self, record: dict[str, Any], examples: Mapping[int, int]) -> None:
        """Add a round's record; ``examples`` are its trained clients' ``|D_k|``."""
        self._count += 1
        if self._dir is None:
            self._records.append(record)
            self._examples.append({"train": dict(examples)})
            return
        self._last = record
        if self._guard is not None:  # a round is done: its records replace an earlier run's
            self._guard.commit()
        self._persist(record, {"train": examples})

    def write_clients(self, stage: str, round_number: int, per_client: Mapping[Any, Any], examples: Any) -> None:
        """Write per-client metrics that are no round's record (the evaluation before round 1)."""
        if self._dir is not None and self._writer:
            path = client_file(self._dir, stage, round_number)
            self._write(path, lambda: write_client_file(path, stage, round_number, per_client, examples))

    def _write(self, path: Path, action: Any) -> None:
        """``action`` now, or (an earlier run's file) once this run has completed a round."""
        if self._guard is None:
            action()
        else:
            self._guard.write(path, action)

    def update_last(self, fields: dict[str, Any], examples: Mapping[int, int]) -> None:
        """Add ``fields`` (the round's evaluation) to the last record; ``examples`` are the
        evaluated clients' example counts."""
        if self._records:
            self._records[-1].update(fields)
            self._examples[-1]["val"] = dict(examples)
            return
        if self._last is None:  # restored from a checkpoint: read it back
            self._last = self[-1]
        self._last.update(fields)
        if self._writer:
            line, offset = _encode(_line(self._last)), self._last_offset
            self._write(self._dir / ROUNDS_FILE, lambda: self._rewrite_from(offset, line))
            if "val_clients" in fields:
                self.write_clients("val", self._last["round"], fields["val_clients"], examples)

    def _rewrite_from(self, offset: int, line: bytes) -> None:
        with open(self._dir / ROUNDS_FILE, "r+b") as f:
            f.seek(offset)
            f.truncate()
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def _persist(self, record: dict[str, Any], examples: Mapping[str, Mapping[int, int]]) -> None:
        if not self._writer:
            return
        with open(self._dir / ROUNDS_FILE, "ab") as f:
            f.seek(0, os.SEEK_END)
            self._last_offset = f.tell()
            f.write(_encode(_line(record)))
            f.flush()
            os.fsync(f.fileno())
        for stage, key in PER_CLIENT.items():
            if key in record:
                self.write_clients(stage, record["round"], record[key], examples.get(stage, {}))

    # ------------------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        """The count and the folder; the records themselves only when they have no folder."""
        if self.folder is None:  # a private round's clients stay out of the checkpoint too
            return {"history": [_public(r) for r in self._records]}
        return {"rounds": self._count, "folder": str(self.folder.resolve())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a checkpoint's history; the files are cut back to it at :meth:`attach`.

        A checkpoint of an earlier version holds the records themselves (``history``): they are
        written out to the run folder then.
        """
        self.__init__()
        if "history" in state:
            self._records = list(state["history"])
            self._examples = [{} for _ in self._records]
            self._count = len(self._records)
        else:
            self._count = int(state.get("rounds", 0))
            self._source = Path(state["folder"]) if state.get("folder") else None
