"""Results of ``lightning-fed validate`` / ``test``: per client, per group, overall, as JSON.

Every per-example metric is averaged over all examples (``metrics``), per client
(``clients``, with the distribution over clients in ``metrics``: ``<m>_client_mean``,
``_client_min``, ``_client_max`` and the percentiles ``_client_p10``, ``_client_p50``,
``_client_p90``) and, when the data has a group column, per group (``groups``).
:func:`stage_scalars` turns them into logged scalars: per client up to
``federation.per_client_scalars`` clients, one TensorBoard histogram per metric beyond.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lightning_fed.federation.client_stats import distribution, per_client_logging
from lightning_fed.federation.version_folder import checkpoint_run


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
            metrics.update({f"{k}_client_{s}": v for s, v in distribution(vals).items()})
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


def stage_scalars(trainer: Any, results: dict[str, Any], stage: str, step: int, threshold: int) -> dict[str, float]:
    """The scalars to log of a stage's :meth:`StageResults.summary`.

    Overall metrics and their distribution over clients (``<stage>/<m>``), per group
    (``<stage>_group_<g>/<m>``), and per client (``<stage>_client_<k>/<m>``) while at most
    ``threshold`` clients were evaluated; beyond that, one histogram per metric over the
    clients (``<stage>_clients/<m>``) is written to every TensorBoard logger instead.
    """
    scalars = {f"{stage}/{k}": v for k, v in results["metrics"].items()}
    scalars.update(
        per_client_logging(
            trainer,
            results["clients"],
            step,
            threshold,
            lambda c, k: f"{stage}_client_{c}/{k}",
            lambda k: f"{stage}_clients/{k}",
        )
    )
    scalars.update({f"{stage}_group_{g}/{k}": v for g, m in results["groups"].items() for k, v in m.items()})
    return scalars


def results_dir(ckpt_path: str | None, fallback: Path) -> Path:
    """Where ``<stage>_results.json`` goes: the checkpoint's run folder
    (:func:`~lightning_fed.federation.version_folder.checkpoint_run`, where the live CLI places the logger
    too), else ``fallback``, the run's own folder (a checkpoint outside a run folder is evaluated in a new
    ``version_N``, its results beside its events and ``config.yaml``; issue 41)."""
    return checkpoint_run(ckpt_path) or fallback


def write_results(path: Path, results: dict[str, Any]) -> Path:
    """Write ``results`` as JSON atomically (a crash never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=2, default=str))
    os.replace(tmp, path)
    return path
