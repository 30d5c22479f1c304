"""Round records, per-client evaluation, TensorBoard scalars and ``summary.json``.

Round-level scalars are logged with the round number as the step (``round/*``, ``comm/*``);
the evaluation means are also logged through ``pl_module.log`` as ``val/<metric>`` so that
checkpoint monitoring and early stopping can use them. Per-client values are scalars of their
own (``client_<k>/*``) while a round reports at most ``per_client_scalars`` clients, and one
histogram per metric (``clients/<m>``, ``clients/val_<m>``) beyond that. Every round logs each
metric's distribution over clients (``round/train_loss_client_p50``, ``round/val_<m>_client_p10``...).

The round records go to ``<run>/rounds.jsonl`` and the per-client metrics to Parquet files
under ``<run>/client_metrics/`` (:mod:`~lightning_fed.federation.round_history`); checkpoints
hold only the number of rounds recorded, the evaluation before round 1 and the config.
``summary.json`` holds the run's figures, which do not grow with the number of clients.

With differential privacy on (:attr:`RoundReport.private`, set by the run's privacy plan) the
reports the server writes hold no raw per-client figure: per-client metrics (losses, update
norms, evaluations) and their distributions over clients are withheld (not in ``rounds.jsonl``,
``summary.json``, the Parquet files or TensorBoard; only the example-weighted evaluation means
remain), and example counts are bucketed (:func:`bucket_count`). ``privacy/epsilon`` is logged
per round. Unless ``federation.privacy.report_validation`` opts in
(:attr:`RoundReport.withhold_validation`), a private run writes nothing computed on the clients'
validation data, not even those means: no ``val`` in the records, no ``val/*`` or ``round/val_*``
scalar, nothing a checkpoint monitor could save.
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

from lightning_fed.federation.client_metrics import CLIENTS_DIR
from lightning_fed.federation.client_stats import (
    DEFAULT_PER_CLIENT_SCALARS,
    client_summary,
    distribution,
    numeric,
    per_client_logging,
)
from lightning_fed.federation.round_history import ROUNDS_FILE, RoundHistory
from lightning_fed.federation.run_folder import earlier_files
from lightning_fed.strategies.base import ClientUpdate

SIZES_FILE = "client_sizes.parquet"


def bucket_count(n: int) -> int:
    """The largest power of two ``<= n`` (``n >= 1``): 1, 2, 4, 8, ... (37 -> 32)."""
    if n < 1:
        raise ValueError(f"an example count must be >= 1, got {n}")
    return 1 << (int(n).bit_length() - 1)


def totals_only(report: Any) -> Any:
    """``report`` with every per-client list of numbers replaced by its total (for a private run's
    ``summary.json``: e.g. the data report's examples truncated per client)."""
    if isinstance(report, dict):
        return {k: totals_only(v) for k, v in report.items()}
    if isinstance(report, list) and report and all(isinstance(v, (int, float)) for v in report):
        return sum(report)
    return report


def _replace_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a crash never leaves half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def log_scalars(trainer: pl.Trainer, metrics: dict[str, float], step: int) -> None:
    """Log ``metrics`` at ``step`` (the round number) to every logger, on rank zero."""
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)


class RoundReport:
    """Keeps the run's history (one record per round) and writes it out.

    Args:
        per_client_scalars: Per-client TensorBoard scalars while a round reports at most this
            many clients; beyond it, a histogram per metric (``federation.per_client_scalars``).

    Attributes:
        private: Withhold per-client metrics and bucket example counts (see the module docstring).
        withhold_validation: Write nothing of the clients' evaluations (a private run's default).
    """

    def __init__(self, per_client_scalars: int = DEFAULT_PER_CLIENT_SCALARS) -> None:
        self._history = RoundHistory()
        self.per_client_scalars = per_client_scalars
        self.private = False
        self.withhold_validation = False
        self.initial_eval: dict[str, Any] | None = None
        self.config: dict[str, Any] | None = None  # the resolved run config, set by the CLI
        self.clients: dict[str, Any] = {}
        self._sizes: tuple[list[int], list[int]] = ([], [])
        self._sums: dict[int, dict[str, float]] = {}
        self._counts: dict[int, int] = {}

    @property
    def history(self) -> RoundHistory:
        """The round records: ``len``, ``[i]``, ``[-1]``, iteration (older rounds read from the run folder)."""
        return self._history

    def _attach(self, trainer: Any) -> None:
        """Keep the records in the run folder from the first write on (in memory without one)."""
        if self._history.attached or trainer is None:
            return
        folder = getattr(trainer, "log_dir", None) or getattr(trainer, "default_root_dir", None)
        guard = None
        if folder is not None:
            guard = earlier_files(trainer, folder)  # before this run writes there
            Path(folder).mkdir(parents=True, exist_ok=True)
        self._history.attach(folder, writer=getattr(trainer, "is_global_zero", True), guard=guard)

    @staticmethod
    def output_dir(trainer: pl.Trainer) -> Path:
        """Where the run's artefacts go: the logger's version folder, else ``default_root_dir``."""
        path = Path(trainer.log_dir or trainer.default_root_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def set_clients(self, train_sizes: list[int], val_sizes: list[int]) -> None:
        """Record (and print once) how the data was partitioned."""
        # summary.json gets their distribution (its size does not grow with N); the sizes
        # themselves go to <run>/client_sizes.parquet (bucketed when the run is private)
        if self.private:
            train_sizes = [bucket_count(n) if n > 0 else 0 for n in train_sizes]
            val_sizes = [bucket_count(n) if n > 0 else 0 for n in val_sizes]
        self._sizes = (list(train_sizes), list(val_sizes))
        self.clients = {
            "num_clients": len(train_sizes),
            "train_examples": sum(train_sizes),
            "val_examples": sum(val_sizes),
            "train_size": distribution(train_sizes) if train_sizes else None,
            "val_size": distribution(val_sizes) if val_sizes else None,
            "sizes_file": SIZES_FILE,
        }
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
        scalars: dict[str, float] | None = None,
    ) -> None:
        """Record and log a round once its aggregation is done (``scalars``: more to log, e.g.
        ``privacy/epsilon``, also kept in the record)."""
        per_client = {} if self.private else {str(u.client_id): numeric(u.metrics) for u in updates}
        stats = client_summary(per_client) if per_client else {}
        record = {
            "round": round_idx + 1,
            "clients": clients,
            "aggregated": [u.client_id for u in updates],
            "failed": failed,
            "rejected": rejected,
            "up_bytes": up_bytes,
            "down_bytes": down_bytes,
            "seconds": seconds,
            "train_stats": stats,
        }
        if self.private:  # the sample is secret: the lists stay in memory, no file gets them (round_history)
            record["sample"] = "withheld"
        if not self.private:
            record["train"] = {str(u.client_id): u.metrics for u in updates}
        else:  # who was rejected, and why (its norm), are per-client figures: the run's total only
            del record["rejected"]
        extra = dict(scalars or {})
        if extra:
            record["scalars"] = extra
        self._attach(trainer)
        counts = {u.client_id: bucket_count(u.num_examples) if self.private else u.num_examples for u in updates}
        self.history.append(record, counts)
        scalars = {
            **extra,
            "comm/up_bytes": float(up_bytes),
            "comm/down_bytes": float(down_bytes),
            "round/seconds": seconds,
            "round/failed_clients": float(len(failed)),
            **{f"round/{k}": v for k, v in stats.items()},  # e.g. round/train_loss_client_p50
        }
        if not self.private:
            scalars["round/rejected_updates"] = float(len(rejected))
        scalars.update(
            per_client_logging(
                trainer,
                per_client,
                round_idx + 1,
                self.per_client_scalars,
                lambda c, k: f"client_{c}/{k}",
                lambda k: f"clients/{k}",  # as client_<k>/<metric>
            )
        )
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
        """Per-client means, their distribution over clients, and the example-weighted mean of every metric."""
        self._attach(trainer)  # before any return: on every process alike (Trainer.log_dir is collective)
        if not self._counts or self.withhold_validation:
            return
        per_client = {cid: {k: s / self._counts[cid] for k, s in sums.items()} for cid, sums in self._sums.items()}
        total = sum(self._counts.values())
        summary: dict[str, float] = {}
        names = sorted(next(iter(per_client.values())))
        for k in names:
            summary[k] = sum(self._sums[c][k] for c in per_client) / total
            if not self.private:  # a distribution over clients shows single clients' values (min, max)
                values = [m[k] for m in per_client.values()]
                summary.update({f"{k}_client_{s}": v for s, v in distribution(values).items()})
        result: dict[str, Any] = {"round": round_number, "val": summary}
        if not self.private:
            result["val_clients"] = {str(c): m for c, m in sorted(per_client.items())}
        scalars = {f"round/val_{k}": v for k, v in summary.items()}
        if not self.private:
            scalars.update(
                per_client_logging(
                    trainer,
                    per_client,
                    round_number,
                    self.per_client_scalars,
                    lambda c, k: f"client_{c}/val_{k}",
                    lambda k: f"clients/val_{k}",
                )
            )
        counts = {c: bucket_count(n) for c, n in self._counts.items()} if self.private else dict(self._counts)
        if initial:
            self.initial_eval = result
            if not self.private:
                self.history.write_clients("val", 0, result["val_clients"], counts)
        else:
            # Only the example-weighted means go through Lightning's logging (checkpoint monitors,
            # early stopping, the progress bar): each call costs ~5-10 ms on a CPU, so the
            # distributions over clients go to the loggers directly (`round/val_*`).
            for k in names if pl_module is not None else ():  # None on a Flower server
                pl_module.log(f"val/{k}", summary[k], prog_bar=k in ("pref_acc", "loss"))
            if self.history and self.history[-1]["round"] == round_number:
                fields = {k: v for k, v in result.items() if k in ("val", "val_clients")}
                self.history.update_last(fields, counts)
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
        """Write ``summary.json``: config, clients, per-round figures, final metrics, bytes and times.

        Its size grows with the rounds, not with the number of clients: each round's line of
        ``rounds.jsonl`` (distributions over clients, not per-client values), and ``initial`` /
        ``final`` with the evaluated clients' metrics. The per-client records are in the files
        it names (``round_history``, ``client_metrics``, ``clients.sizes_file``).
        """
        self._attach(trainer)
        rounds = list(self.history.lines())
        last = next((i for i in range(len(rounds) - 1, -1, -1) if "val" in rounds[i]), None)
        final = None
        if last is not None:
            record = self.history[last]
            final = {"val": record["val"]}
            if not self.private:
                final["val_clients"] = record.get("val_clients", {})
        summary = {
            "config": self.config,
            "clients": self.clients,
            "initial": self.initial_eval,
            "rounds": rounds,
            "final": final,
            "total_up_bytes": sum(r["up_bytes"] for r in rounds),
            "total_down_bytes": sum(r["down_bytes"] for r in rounds),
            "seconds_per_round": [r["seconds"] for r in rounds],
            "round_history": ROUNDS_FILE,
            "client_metrics": CLIENTS_DIR,
            **extra,
        }
        path = self.output_dir(trainer) / "summary.json"
        if trainer.is_global_zero:
            # An earlier run's files (a resume in its folder) are replaced once this run has
            # completed a round; a run that fails before leaves them as they were.
            guard = self._history.guard or earlier_files(trainer, path.parent)
            if self._sizes[0]:
                guard.write(path.parent / SIZES_FILE, lambda: self._write_sizes(path.parent / SIZES_FILE))
            text = json.dumps(summary, indent=2, default=str)
            guard.write(path, lambda: _replace_text(path, text))
        return path

    def _write_sizes(self, path: Path) -> None:
        """``client``, ``train_size``, ``val_size`` of every client, as Parquet."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        train, val = self._sizes
        table = pa.table({"client": list(range(len(train))), "train_size": train, "val_size": val})
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, path)

    def state_dict(self) -> dict[str, Any]:
        # Only what a resume needs: the rounds recorded (their records stay in the run folder;
        # a resume cuts the files back to this count), the evaluation before round 1 (of the
        # evaluated clients: bounded), and the config, so that a resume can be checked against
        # the run's own (lightning_fed.federation.resume_check); loading keeps the new run's config.
        return {**self.history.state_dict(), "initial_eval": self.initial_eval, "config": self.config}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._history.load_state_dict(state)
        self.initial_eval = state.get("initial_eval")
