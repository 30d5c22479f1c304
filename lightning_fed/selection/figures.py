"""The per-round selection figure: fused features coloured by client, selected samples marked.

Written as ``selection/round_NNN.png`` in the run folder and, with a
:class:`~lightning.pytorch.loggers.TensorBoardLogger`, as the TensorBoard figure
``selection/fused_features``. Needs matplotlib (drawn with the non-interactive Agg
backend); without it the figure is skipped with one warning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import lightning.pytorch as pl

_warned = False


def selection_figure(points: dict[int, np.ndarray], selected: dict[int, list[int]], title: str) -> Any:
    """A matplotlib figure of every client's 2-D points, selected ones as black crosses."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4.5), dpi=100)
    cmap = plt.get_cmap("tab10" if len(points) <= 10 else "tab20")
    for j, (cid, xy) in enumerate(sorted(points.items())):
        xy = np.asarray(xy)[:, :2]
        ax.scatter(xy[:, 0], xy[:, 1], s=9, alpha=0.6, color=cmap(j % cmap.N), label=f"client {cid}")
        chosen = [i for i in selected.get(cid, []) if i < len(xy)]
        if chosen:
            ax.scatter(xy[chosen, 0], xy[chosen, 1], s=70, marker="x", color="black", linewidths=1.5)
    ax.set_title(title, fontsize=9)
    if len(points) <= 12:
        ax.legend(fontsize=6, loc="best", markerscale=1.5)
    fig.tight_layout()
    return fig


def log_selection_figure(
    trainer: pl.Trainer, round_idx: int, points: dict[int, np.ndarray], selected: dict[int, list[int]], method: str
) -> None:
    """Draw the round's figure; save it as PNG in the run folder and to TensorBoard."""
    global _warned
    if trainer is None or not trainer.is_global_zero:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if not _warned:
            from lightning.pytorch.utilities import rank_zero_warn

            rank_zero_warn("selection figures need matplotlib (`pip install matplotlib`); skipping them")
            _warned = True
        return
    import matplotlib.pyplot as plt
    from lightning.pytorch.loggers import TensorBoardLogger

    from lightning_fed.federation.report import RoundReport

    n_sel = sum(len(v) for v in selected.values())
    n_all = sum(len(v) for v in points.values())
    fig = selection_figure(points, selected, f"{method}, round {round_idx + 1}: {n_sel} of {n_all} samples selected")
    folder = RoundReport.output_dir(trainer) / "selection"
    folder.mkdir(parents=True, exist_ok=True)
    fig.savefig(folder / f"round_{round_idx + 1:03d}.png")
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_figure("selection/fused_features", fig, global_step=round_idx + 1, close=False)
    plt.close(fig)
