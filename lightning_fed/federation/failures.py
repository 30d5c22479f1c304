"""Client fault isolation: a client whose local step raises is left out of its round.

The :class:`~lightning_fed.callbacks.FederatedLoop` wraps the module's ``training_step`` once
in :func:`guard_training_step` and removes the wrapper in its ``teardown``. After a failure
the :class:`~lightning_fed.federation.turn.ClientTurn` is marked failed, its remaining
batches return ``None`` (Lightning then skips the optimizer step), and the server side
counts the client as failed instead of aggregating its update.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Protocol

from lightning.pytorch.utilities import rank_zero_warn

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.turn import ClientTurn
    from lightning_fed.run_config import FederationConfig


class TurnOwner(Protocol):
    """What the guard reads of its owner: the current turn (``None`` between turns) and the run
    (its ``isolate_failures`` policy)."""

    turn: ClientTurn | None
    run: FederationConfig


def guard_training_step(owner: TurnOwner, module: pl.LightningModule) -> None:
    """Wrap ``module.training_step`` (once) so a raising client is isolated by ``owner``."""
    step_fn = module.training_step
    if getattr(step_fn, "__wrapped_by_loop__", None) is not None:
        return

    @functools.wraps(step_fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        turn = owner.turn
        if turn is not None and turn.failed:
            return None  # skip the failed client's remaining batches
        try:
            return step_fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - any client fault is isolated, then reported
            if not owner.run.isolate_failures or turn is None:
                raise
            turn.fail()
            line = getattr(turn, "failure_line", None)  # a group of clients trained together says its own
            who = "a client" if turn.private else f"client {turn.client_id}"  # private: the sample is secret
            rank_zero_warn(
                line(err) if line else f"{who} failed in round {turn.round_idx + 1} and is left out: {err!r}"
            )
            return None

    guarded.__wrapped_by_loop__ = owner
    module.training_step = guarded


def unguard_training_step(owner: TurnOwner, module: pl.LightningModule) -> None:
    """Undo :func:`guard_training_step` for ``owner``: the module's own step again."""
    step = module.__dict__.get("training_step")
    if getattr(step, "__wrapped_by_loop__", None) is not owner:
        return
    module.training_step = step.__wrapped__  # what it was before the guard
    if module.training_step == type(module).training_step.__get__(module):
        del module.training_step
