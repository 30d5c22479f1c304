"""Per-client metrics on disk: one Parquet file per stage and round, in the run folder.

``client_metrics/<stage>/round_<r>.parquet``, ``stage`` ``train`` (the trained clients) or
``val`` (the evaluated clients; round 0 is the evaluation before round 1): one row per client,
columns ``round``, ``client``, ``stage``, ``num_examples`` and one per metric, written atomically
(:func:`write_client_file`). :func:`read_client_metrics` reads a stage's rounds back as one table;
:class:`~lightning_fed.federation.round_history.RoundHistory` keeps the files in step with
``rounds.jsonl``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CLIENTS_DIR = "client_metrics"
ROUNDS_FILE = "rounds.jsonl"
"""The run folder's round history (:mod:`~lightning_fed.federation.round_history`); named here, in a
module that imports no Lightning, for ``lightning-fed report`` (:mod:`lightning_fed.report.runs`)."""
PER_CLIENT = {"train": "train", "val": "val_clients"}
"""Stage of a Parquet file -> the key of a round record that holds its per-client metrics."""
COLUMNS = ("round", "client", "stage", "num_examples")
"""The columns of a per-client file besides one per metric."""
_ROUND_FILE = re.compile(r"round_(\d+)\.parquet")


def client_file(run_dir: Path, stage: str, round_number: int) -> Path:
    """``<run>/client_metrics/<stage>/round_<r>.parquet``."""
    return Path(run_dir) / CLIENTS_DIR / stage / f"round_{round_number:06d}.parquet"


def round_files(run_dir: Path, stage: str) -> list[tuple[int, Path]]:
    """``(round, path)`` of every per-client file of ``stage`` in ``run_dir``, by round."""
    folder = Path(run_dir) / CLIENTS_DIR / stage
    if not folder.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in folder.iterdir() if (m := _ROUND_FILE.fullmatch(p.name)))


def fsync_file(path: Path) -> None:
    """Flush ``path``'s contents to the disk."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def write_client_file(
    path: Path,
    stage: str,
    round_number: int,
    per_client: Mapping[Any, Mapping[str, float]],
    examples: Mapping[int, int],
) -> None:
    """Write one round's per-client metrics of one stage atomically (a kill never leaves half a file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    clients = sorted(per_client, key=int)
    names = sorted({k for m in per_client.values() for k in m} - set(COLUMNS))
    columns = {
        "round": pa.array([round_number] * len(clients), pa.int64()),
        "client": pa.array([int(c) for c in clients], pa.int64()),
        "stage": pa.array([stage] * len(clients), pa.string()),
        "num_examples": pa.array([examples.get(int(c)) for c in clients], pa.int64()),
        **{k: pa.array([_float(per_client[c].get(k)) for c in clients], pa.float64()) for k in names},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.table(columns), tmp)
    fsync_file(tmp)
    os.replace(tmp, path)


def _float(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def read_client_file(path: Path) -> dict[str, dict[str, float]]:
    """``{client (str): {metric: value}}`` of one per-client file (as in a round record)."""
    import pyarrow.parquet as pq

    return {
        str(row["client"]): {k: v for k, v in row.items() if k not in COLUMNS and v is not None}
        for row in pq.read_table(path).to_pylist()
    }


def read_client_metrics(run_dir: str | Path, stage: str = "val") -> Any:
    """Every round's per-client metrics of ``stage`` (``train`` or ``val``) as one ``pyarrow.Table``
    (``.to_pandas()`` for a DataFrame); a metric missing from some rounds is null there."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if stage not in PER_CLIENT:
        raise ValueError(f"stage must be one of {sorted(PER_CLIENT)}, got {stage!r}")
    files = round_files(Path(run_dir), stage)
    if not files:
        raise FileNotFoundError(f"no per-client {stage} metrics under {Path(run_dir) / CLIENTS_DIR / stage}")
    return pa.concat_tables([pq.read_table(p) for _, p in files], promote_options="default")
