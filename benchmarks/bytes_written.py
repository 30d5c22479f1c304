"""Bytes a federated run writes per round, against the client state that changed in the round.

Runs ``lightning-fed fit`` in this process with the given arguments and, at the start of every
round and after the fit, takes a snapshot of the run folder (size and mtime of every file) and
of ``/proc/self/io`` ``write_bytes``. A round's bytes are the sizes of the files created or
modified since the previous snapshot (a rewritten file counts whole), so round r holds round r's
training, evaluation and checkpoint; the last round also holds what ``on_train_end`` writes.
The state that changed in a round is the trained clients' stored state (personal parameters and
algorithm memory) plus the global shared state, as the loop holds them.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bytes_written.py -- fit --config configs/fedpdpo.yaml \\
        --federation.rounds=2 --federation.local_steps=1 --trainer.default_root_dir=/tmp/bw \\
        --federation.state_offload_dir=/tmp/bw/client_states

Everything under ``trainer.default_root_dir`` is counted (give each run its own); put
``federation.state_offload_dir`` under it when it is set.

Run it with ``PYTHONPATH`` at another checkout to measure that checkout's layout (the "before"
of RESULTS.md). The last line is ``bytes_written: per_round_mb=[...] changed_mb=[...] ratio=[...]``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

MB = 1e6


def proc_write_bytes() -> int:
    """``write_bytes`` of this process (bytes sent to the storage layer), or 0 where unavailable."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of every file under ``folder``."""
    out = {}
    for path in folder.rglob("*"):
        try:
            st = path.stat()
        except FileNotFoundError:  # removed while listing (a temporary file, a collected version)
            continue
        if path.is_file():
            out[str(path.relative_to(folder))] = (st.st_size, st.st_mtime_ns)
    return out


def written(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, int]:
    """Files created or modified between two snapshots, with their sizes."""
    return {k: v[0] for k, v in after.items() if before.get(k) != v}


def group(files: dict[str, int]) -> dict[str, float]:
    """MB written by kind: checkpoints, client state files, other."""
    kinds: dict[str, float] = {}
    for name, size in files.items():
        kind = (
            "checkpoints"
            if name.endswith(".ckpt")
            else "client_states"
            if "client_states" in name or name.startswith("client_")
            else "personal_states.pt"
            if name.endswith("personal_states.pt")
            else "other"
        )
        kinds[kind] = kinds.get(kind, 0.0) + size / MB
    return {k: round(v, 1) for k, v in sorted(kinds.items())}


class Recorder:
    """Snapshots at each round's start; the loop's changed state at each round's end."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.snaps: list[tuple[dict[str, tuple[int, int]], int]] = []
        self.changed: list[int] = []

    def round_start(self, loop: Any, trainer: Any) -> None:
        if self.folder is None:
            self.folder = Path(trainer.default_root_dir)  # the run folder, and client states put beside it
        self.snaps.append((snapshot(self.folder), proc_write_bytes()))

    def round_end(self, loop: Any) -> None:
        # Every trained client's personal state has the module's personal shapes (read from the
        # module: asking the store would load and evict states, i.e. write). No algorithm memory
        # is counted: use a strategy without client memory (FedAvg).
        from lightning_fed.state import state_nbytes

        personal = state_nbytes(loop.module.personal_parameters())
        self.changed.append(len(loop.plans) * personal + state_nbytes(loop.server.global_state))


def main(argv: list[str]) -> None:
    cli_args = argv[argv.index("--") + 1 :] if "--" in argv else argv
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.cli import main as cli_main

    rec = Recorder()
    start, end = FederatedLoop.on_train_epoch_start, FederatedLoop.end_round

    def on_train_epoch_start(self, trainer, pl_module):  # noqa: ANN001, ANN202
        rec.round_start(self, trainer)
        start(self, trainer, pl_module)

    def end_round(self, trainer, pl_module):  # noqa: ANN001, ANN202
        end(self, trainer, pl_module)
        rec.round_end(self)

    FederatedLoop.on_train_epoch_start, FederatedLoop.end_round = on_train_epoch_start, end_round
    sys.argv[1:] = cli_args  # LightningCLI reads both
    cli_main(cli_args)
    rec.snaps.append((snapshot(rec.folder), proc_write_bytes()))

    rounds = []
    for r, changed in enumerate(rec.changed):
        (before, io0), (after, io1) = rec.snaps[r], rec.snaps[r + 1]
        files = written(before, after)
        total = sum(files.values())
        rounds.append(
            {
                "round": r + 1,
                "files_mb": round(total / MB, 1),
                "by_kind_mb": group(files),
                "proc_write_mb": round((io1 - io0) / MB, 1),
                "changed_mb": round(changed / MB, 1),
                "ratio": round(total / changed, 3),
            }
        )
    for record in rounds:
        print(json.dumps(record))
    print(
        "bytes_written:"
        f" per_round_mb={[r['files_mb'] for r in rounds]}"
        f" changed_mb={[r['changed_mb'] for r in rounds]}"
        f" ratio={[r['ratio'] for r in rounds]}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
