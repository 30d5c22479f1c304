"""Results of ``lightning-fed validate`` / ``test``: per client, per group, overall, as JSON.

Every per-example metric is averaged over all examples (``metrics``), per client
(``clients``, with the mean, minimum and maximum over clients in ``metrics`` as
``<m>_client_mean`` etc.) and, when the data has a group column, per group (``groups``).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor


def _means(sums: dict[str, float], count: int) -> dict[str, float]:
    return {k: v / count for k, v in sorted(sums.items())}


class StageResults:
    """Accumulates per-example metrics under their client and group."""

    def __init__(self) -> None:
        self.sums: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.counts: dict[int, int] = defaultdict(int)
        self.group_sums: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.group_counts: dict[int, int] = defaultdict(int)

    def add(self, client_ids: Tensor, outputs: dict[str, Tensor], group_ids: Tensor | None = None) -> None:
        """Add a batch: ``outputs`` maps metric names to ``(B,)`` tensors."""
        values = {
            k: v.detach().float().cpu().tolist() for k, v in outputs.items() if torch.is_tensor(v) and v.dim() == 1
        }
        groups = group_ids.tolist() if group_ids is not None else None
        for j, cid in enumerate(client_ids.tolist()):
            self.counts[cid] += 1
            if groups is not None:
                self.group_counts[groups[j]] += 1
            for k, v in values.items():
                self.sums[cid][k] += v[j]
                if groups is not None:
                    self.group_sums[groups[j]][k] += v[j]

    def summary(self, group_names: list[str] | None = None) -> dict[str, Any]:
        """``{"metrics", "clients", "groups", "num_examples"}`` (empty when nothing was added)."""
        clients = {cid: _means(self.sums[cid], n) for cid, n in sorted(self.counts.items())}
        total = sum(self.counts.values())
        metrics: dict[str, float] = {}
        for k in sorted({k for m in clients.values() for k in m}):
            vals = [m[k] for m in clients.values() if k in m]
            metrics[k] = sum(self.sums[c][k] for c in clients) / total
            metrics[f"{k}_client_mean"] = sum(vals) / len(vals)
            metrics[f"{k}_client_min"] = min(vals)
            metrics[f"{k}_client_max"] = max(vals)
        names = group_names or []
        groups = {
            (names[g] if g < len(names) else str(g)): {**_means(self.group_sums[g], n), "num_examples": n}
            for g, n in sorted(self.group_counts.items())
        }
        return {
            "num_examples": total,
            "metrics": metrics,
            "clients": {str(c): {**m, "num_examples": self.counts[c]} for c, m in clients.items()},
            "groups": groups,
        }


def results_dir(ckpt_path: str | None, fallback: Path) -> Path:
    """The run folder of a checkpoint (``<run>/checkpoints/last.ckpt`` -> ``<run>``), else ``fallback``."""
    if not ckpt_path:
        return fallback
    parent = Path(ckpt_path).expanduser().resolve().parent
    return parent.parent if parent.name == "checkpoints" else parent


def write_results(path: Path, results: dict[str, Any]) -> Path:
    """Write ``results`` as JSON atomically (a crash never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2, default=str))
    os.replace(tmp, path)
    return path
