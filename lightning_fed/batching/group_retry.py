"""A group whose step raised: its clients train again one after another, so only the failing one is left out.

A step of clients trained together is one forward over all their rows: when it raises (one client's
rows make the module fail), no client of the group can be told from another. The group is then
marked as needing a retry (:meth:`~lightning_fed.batching.batched_turns.TurnGroup.fail`), its
remaining batches are skipped as a failed turn's are, and at the group's end
:func:`train_alone` trains each of its clients again from the state the server sent it, on its own
rows of the group's batches (the rows its sequential turn trains on), with the module's own
``training_step`` behind the loop's failure guard: a client that raises alone is left out, the others
upload what their sequential turns upload. The steps follow Lightning's automatic optimization in
its order: the step, the backward, the turn's gradient correction, the clip, the optimizer step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from lightning_fed.federation.turn import ClientTurn


def client_rows(batch: Any, client_id: int) -> Any:
    """The rows of ``batch`` (a dict with a ``client_id`` column) that belong to ``client_id``; a value
    that is not a tensor with a row per example is kept as it is."""
    ids = batch["client_id"]
    keep = ids == client_id
    rows = int(ids.shape[0])
    return {k: v[keep] if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == rows else v for k, v in batch.items()}


def train_alone(trainer: Any, module: Any, turn: ClientTurn, batches: Sequence[Any]) -> None:
    """Train ``turn`` (begun) on ``batches`` (its own rows), one optimizer step per
    ``accumulate_grad_batches`` batches, as Lightning's automatic optimization steps its sequential turn.

    ``module.training_step`` is the loop's guarded one: if it raises, ``turn`` is marked failed and its
    remaining batches are not trained."""
    optimizer = trainer.optimizers[0]
    accumulate = trainer.accumulate_grad_batches
    try:
        optimizer.zero_grad()
        for i, batch in enumerate(batches):
            with trainer.precision_plugin.train_step_context():
                out = module.training_step(batch, i)
            if out is None or turn.failed:
                break
            loss = (out["loss"] if isinstance(out, dict) else out) / accumulate
            trainer.strategy.backward(loss, optimizer)
            if (i + 1) % accumulate == 0 or i == len(batches) - 1:
                turn.before_optimizer_step(optimizer.param_groups[0]["lr"])  # on_before_optimizer_step
                module.configure_gradient_clipping(
                    optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm
                )
                optimizer.step()
                optimizer.zero_grad()
            turn.after_optimizer_step()
            turn.record_loss(loss.detach())
    finally:
        optimizer.zero_grad()
