"""Round records, per-client evaluation, TensorBoard scalars and ``summary.json``.

Round-level scalars are logged with the round number as the step (``round/*``, ``comm/*``,
``client_<k>/*``); the evaluation means are also logged through ``pl_module.log`` as
``val/<metric>`` so that checkpoint monitoring and early stopping can use them.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from lightning_fed.strategies.base import ClientUpdate


def log_scalars(trainer: pl.Trainer, metrics: dict[str, float], step: int) -> None:
    """Log ``metrics`` at ``step`` (the round number) to every logger, on rank zero."""
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)


class RoundReport:
    """Keeps the run's history (one record per round) and writes it out."""

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []
        self.initial_eval: dict[str, Any] | None = None
        self.config: dict[str, Any] | None = None  # the resolved run config, set by the CLI
        self.clients: dict[str, Any] = {}
        self._sums: dict[int, dict[str, float]] = {}
        self._counts: dict[int, int] = {}

    @staticmethod
    def output_dir(trainer: pl.Trainer) -> Path:
        """Where the run's artefacts go: the logger's version folder, else ``default_root_dir``."""
        path = Path(trainer.log_dir or trainer.default_root_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def set_clients(self, train_sizes: list[int], val_sizes: list[int]) -> None:
        """Record (and print once) how the data was partitioned."""
        self.clients = {"num_clients": len(train_sizes), "train_sizes": train_sizes, "val_sizes": val_sizes}
        ordered = sorted(train_sizes)
        rank_zero_info(
            f"federation: {len(train_sizes)} clients, {sum(train_sizes)} training examples,"
            f" per client min {ordered[0]} / median {ordered[len(ordered) // 2]} / max {ordered[-1]}"
        )

    # ---------------------------------------------------------------------------- rounds
    def end_round(
        self,
        trainer: pl.Trainer,
        round_idx: int,
        clients: list[int],
        updates: list[ClientUpdate],
        failed: list[int],
        rejected: dict[int, str],
        up_bytes: int,
        down_bytes: int,
        seconds: float,
    ) -> None:
        """Record and log a round once its aggregation is done."""
        record = {
            "round": round_idx + 1,
            "clients": clients,
            "aggregated": [u.client_id for u in updates],
            "failed": failed,
            "rejected": rejected,
            "up_bytes": up_bytes,
            "down_bytes": down_bytes,
            "seconds": seconds,
            "train": {str(u.client_id): u.metrics for u in updates},
        }
        self.history.append(record)
        scalars = {
            "comm/up_bytes": float(up_bytes),
            "comm/down_bytes": float(down_bytes),
            "round/seconds": seconds,
            "round/failed_clients": float(len(failed)),
            "round/rejected_updates": float(len(rejected)),
        }
        for u in updates:
            scalars.update({f"client_{u.client_id}/{k}": v for k, v in u.metrics.items()})
        log_scalars(trainer, scalars, step=round_idx + 1)

    # -------------------------------------------------------------------------- evaluation
    def start_eval(self) -> None:
        self._sums, self._counts = defaultdict(lambda: defaultdict(float)), defaultdict(int)

    def add_eval(self, client_ids: Tensor, outputs: dict[str, Tensor]) -> None:
        """Accumulate per-example metrics (each a ``(B,)`` tensor) under their clients."""
        ids = client_ids.tolist()
        values = {
            k: v.detach().float().cpu().tolist() for k, v in outputs.items() if torch.is_tensor(v) and v.dim() == 1
        }
        for j, cid in enumerate(ids):
            self._counts[cid] += 1
            for k, v in values.items():
                self._sums[cid][k] += v[j]

    def end_eval(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, round_number: int, initial: bool = False
    ) -> None:
        """Per-client means, their mean/min/max, and the example-weighted mean of every metric."""
        if not self._counts:
            return
        per_client = {cid: {k: s / self._counts[cid] for k, s in sums.items()} for cid, sums in self._sums.items()}
        total = sum(self._counts.values())
        names = sorted(next(iter(per_client.values())))
        summary: dict[str, float] = {}
        for k in names:
            vals = [m[k] for m in per_client.values()]
            summary[k] = sum(self._sums[c][k] for c in per_client) / total
            summary[f"{k}_client_mean"] = sum(vals) / len(vals)
            summary[f"{k}_client_min"] = min(vals)
            summary[f"{k}_client_max"] = max(vals)
        result = {
            "round": round_number,
            "val": summary,
            "val_clients": {str(c): m for c, m in sorted(per_client.items())},
        }
        scalars = {f"round/val_{k}": v for k, v in summary.items()}
        for cid, m in per_client.items():
            scalars.update({f"client_{cid}/val_{k}": v for k, v in m.items()})
        if initial:
            self.initial_eval = result
        else:
            for k, v in summary.items():
                if pl_module is not None:  # None on a Flower server: no Lightning module logs there
                    pl_module.log(f"val/{k}", v, prog_bar=k in ("pref_acc", "loss"))
            if self.history and self.history[-1]["round"] == round_number:
                self.history[-1].update(result)
        log_scalars(trainer, scalars, step=round_number)

    # ---------------------------------------------------------------------------- outputs
    def add_client_eval(self, client_id: int, means: dict[str, float], count: int) -> None:
        """Accumulate a client's already averaged metrics over ``count`` examples (Flower replies)."""
        if count > 0:
            self._counts[client_id] += count
            for k, v in means.items():
                self._sums[client_id][k] += float(v) * count

    def client_means(self, client_id: int) -> tuple[dict[str, float], int]:
        """A client's accumulated per-example means and its number of examples (since :meth:`start_eval`)."""
        count = self._counts.get(client_id, 0)
        sums = self._sums.get(client_id, {})
        return ({k: v / count for k, v in sums.items()} if count else {}), count

    def write_summary(self, trainer: pl.Trainer, extra: dict[str, Any]) -> Path:
        """Write ``summary.json``: config, per-round records, final metrics, bytes and times."""
        last_eval = next((r for r in reversed(self.history) if "val" in r), None)
        summary = {
            "config": self.config,
            "clients": self.clients,
            "initial": self.initial_eval,
            "rounds": self.history,
            "final": {"val": last_eval["val"], "val_clients": last_eval["val_clients"]} if last_eval else None,
            "total_up_bytes": sum(r["up_bytes"] for r in self.history),
            "total_down_bytes": sum(r["down_bytes"] for r in self.history),
            "seconds_per_round": [r["seconds"] for r in self.history],
            **extra,
        }
        path = self.output_dir(trainer) / "summary.json"
        if trainer.is_global_zero:
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(summary, indent=2, default=str))
            os.replace(tmp, path)  # atomic: a crash never leaves half a summary
        return path

    def state_dict(self) -> dict[str, Any]:
        # The config rides along so that a resume can be checked against the run's own
        # (lightning_fed.federation.resume_check); loading keeps the new run's config.
        return {"history": self.history, "initial_eval": self.initial_eval, "config": self.config}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = list(state.get("history", []))
        self.initial_eval = state.get("initial_eval")
