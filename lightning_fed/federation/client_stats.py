"""Per-client metrics at scale: their distribution over clients, and how they are logged.

A round reports one value of each metric per client (the trained clients' training metrics,
the evaluated clients' validation metrics). With a handful of clients each is a TensorBoard
scalar of its own (``client_<k>/<metric>``), as before; with thousands that is thousands of
tags a round. Past ``per_client_scalars`` clients a round therefore logs, per metric, one
TensorBoard histogram over the clients and the distribution's summary (mean, min, max and the
10th/50th/90th percentiles), which every logger gets. The per-client values themselves are
kept in the run's Parquet files (:mod:`lightning_fed.federation.round_history`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from lightning_fed.run_options import DEFAULT_PER_CLIENT_SCALARS  # noqa: F401 - the run's option

STATS = ("mean", "min", "max", "p10", "p50", "p90")
"""The summary of a metric's distribution over clients, as ``<metric>_client_<stat>``."""


def distribution(values: list[float]) -> dict[str, float]:
    """Mean, min, max and the 10th/50th/90th percentiles of ``values`` (not empty).

    Percentiles interpolate linearly between the sorted values (NumPy's default): of
    ``[1, 2, 3, 4, 5]`` the 10th percentile is ``1 + 0.1 * 4 * (2 - 1) = 1.4``.
    """
    t = torch.tensor(values, dtype=torch.float64)
    q = torch.quantile(t, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
    return {
        "mean": float(t.mean()),
        "min": float(t.min()),
        "max": float(t.max()),
        "p10": q[0],
        "p50": q[1],
        "p90": q[2],
    }


def numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    """One client's numeric metrics as floats (booleans and anything not a number left out)."""
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def client_summary(per_client: Mapping[Any, Mapping[str, float]]) -> dict[str, float]:
    """``{"<metric>_client_<stat>": value}`` over the clients that report the metric."""
    names = sorted({k for m in per_client.values() for k in m})
    out: dict[str, float] = {}
    for name in names:
        values = [m[name] for m in per_client.values() if name in m]
        out.update({f"{name}_client_{s}": v for s, v in distribution(values).items()})
    return out


def per_client_logging(
    trainer: Any,
    per_client: Mapping[Any, Mapping[str, float]],
    step: int,
    threshold: int,
    client_tag: Callable[[Any, str], str],
    histogram_tag: Callable[[str], str],
) -> dict[str, float]:
    """Per-client scalars, or one histogram per metric past ``threshold`` clients.

    Args:
        trainer: The run's trainer (or the Flower server's context): its ``loggers``.
        per_client: ``{client: {metric: value}}`` of the round.
        step: The step to log at (the round number).
        threshold: Most clients that still get a scalar each (``federation.per_client_scalars``).
        client_tag: ``(client, metric) -> tag`` of a per-client scalar.
        histogram_tag: ``metric -> tag`` of a histogram over clients.

    Returns:
        The per-client scalars, for the caller to log with its other scalars; empty past the
        threshold, where the histograms have been written to every TensorBoard logger instead
        (the caller logs the distribution's summary, :func:`client_summary`, to all loggers).
    """
    if len(per_client) <= threshold:
        return {client_tag(c, k): v for c, m in per_client.items() for k, v in m.items()}
    if getattr(trainer, "is_global_zero", True):
        from lightning.pytorch.loggers import TensorBoardLogger

        writers = [lg.experiment for lg in getattr(trainer, "loggers", []) if isinstance(lg, TensorBoardLogger)]
        for name in sorted({k for m in per_client.values() for k in m}):
            values = torch.tensor([m[name] for m in per_client.values() if name in m], dtype=torch.float64)
            values = values[torch.isfinite(values)]  # a histogram of a NaN is refused
            if values.numel():
                for writer in writers:
                    writer.add_histogram(histogram_tag(name), values, global_step=step)
    return {}
