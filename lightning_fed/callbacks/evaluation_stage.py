"""The ``validate`` and ``test`` stages after ``fit``: one results file per stage.

:class:`EvaluationStage` evaluates the run's global state (restored from the checkpoint,
or left by a ``fit`` in the same process) with each client's personal state, and writes
``<run>/<stage>_results.json`` plus the stage's metrics (TensorBoard, the results table).
The :class:`~lightning_fed.callbacks.FederatedLoop` starts one per stage.

A private run (differential privacy on) starts none unless ``federation.privacy.report_validation``
opts in; then, as the rounds' evaluations, only the example-weighted means over the evaluated
clients are written (:func:`means_only`): no per-client value, no group (a group may be one
client), no distribution over clients (its min and max are single clients' values), and the data
report reduced to its totals.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_fed.federation.report import totals_only
from lightning_fed.federation.server_round import ServerRound


def means_only(results: dict[str, Any]) -> dict[str, Any]:
    """A private run's stage results: the overall means over the evaluated clients and nothing per
    client (``StageResults.summary``'s ``<m>_client_<stat>`` are single clients' values or spreads)."""
    metrics = {k: v for k, v in results["metrics"].items() if "_client_" not in k}
    out = {**results, "metrics": metrics, "clients": {}, "groups": {}}
    if "data" in out:
        out["data"] = totals_only(out["data"])
    return out


class EvaluationStage:
    """One ``validate``/``test`` run over the federation's clients.

    Args:
        server: The run's server side (its global state and report).
        datamodule: The federated data (the stage's dataset and its data report).
        module: The module evaluated; it is given the global state now and after the stage.
    """

    def __init__(self, server: ServerRound, datamodule: Any, module: pl.LightningModule) -> None:
        # Imported here: `lightning_fed.callbacks` must not pull in the evaluation package (and
        # through it the data modules) when it is imported.
        from lightning_fed.evaluation.stage_results import StageResults

        self.server, self.datamodule = server, datamodule
        if server.global_state:  # restored from the checkpoint, or left by a fit in this process
            module.load_state(server.global_state)
        self.results = StageResults()

    def add(self, batch: Any, outputs: dict[str, Any]) -> None:
        if "client_id" in batch:
            self.results.add(batch["client_id"], outputs, batch.get("group_id"))

    def finish(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Write ``<run>/<stage>_results.json`` and log the metrics (TensorBoard, the results table)."""
        from lightning_fed.evaluation.stage_results import results_dir, stage_scalars, write_results

        dm, report = self.datamodule, self.server.report
        results = self.results.summary(getattr(dm, "group_names", None))
        dataset = (
            dm.test_dataset
            if stage == "test"
            else (dm.val_dataset or f"{dm.dataset} (data.val_fraction={dm.val_fraction})")
        )
        round_number = len(report.history)
        results = {
            "stage": stage,
            "checkpoint": trainer.ckpt_path,
            "round": round_number,
            "dataset": dataset,
            **results,
        }
        if hasattr(dm, "data_report"):
            results["data"] = dm.data_report()
        if report.private:  # federation.privacy.report_validation opted in: the means, as the rounds write
            results = means_only(results)
        if self.server.global_state:
            pl_module.load_state(self.server.global_state)
        if not results["num_examples"]:
            rank_zero_warn(f"{stage}: no examples were evaluated; nothing written")
            return
        for name, value in results["metrics"].items():
            if "_client_" not in name or name.endswith("_client_min"):  # the table: overall and worst client
                pl_module.log(f"{stage}/{name}", value)
        if trainer.is_global_zero:
            scalars = stage_scalars(trainer, results, stage, round_number, report.per_client_scalars)
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=round_number)
            path = write_results(
                results_dir(trainer.ckpt_path, report.output_dir(trainer)) / f"{stage}_results.json", results
            )
            rank_zero_info(f"{stage}: {results['num_examples']} examples of {results['dataset']}; results in {path}")
