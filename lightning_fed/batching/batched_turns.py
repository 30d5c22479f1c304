"""A group of client turns trained together: K :class:`~lightning_fed.federation.turn.ClientTurn`
objects, one stacked adapter, one step per batch.

:class:`TurnGroup` runs each turn's own code: every turn :meth:`~ClientTurn.begin` s in order (its
start state, optimizer state cleared, its hooks) and its adapter values become its slot of the
stacked adapter (:class:`~lightning_fed.batching.multi_lora.StackedLora`); before each optimizer
step every turn's correction acts on its own slot (SCAFFOLD's ``c - c_i``, FedProx's proximal
term) and the gradient is clipped per client (:func:`clip_per_client`, through the driver's
clipping seam in place of Lightning's global clip); each turn records its own loss (the step's
output holds each client's: :func:`~lightning_fed.batching.client_rows.per_client_loss`); at the last batch every turn
:meth:`~ClientTurn.end` s with its own slot, so each uploads the same
:class:`~lightning_fed.strategies.ClientUpdate` as its sequential turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from lightning_fed.batching.client_rows import CLIENT_IDS, CLIENT_LOSSES, ClientRows
from lightning_fed.batching.fallback import fallback_line
from lightning_fed.batching.multi_lora import StackedLora
from lightning_fed.batching.personal_rows import StackedHeads, lora_parameter_ids, personal_heads
from lightning_fed.federation.turn import ClientTurn
from lightning_fed.strategies.base import LocalCorrection


class TurnGroup:
    """The turns of one group while they train together (read by the failure guard and the
    progress bar as the loop's current ``turn``).

    Args:
        turns: The group's turns, not begun, in slot order.
        module: The module they train (``batchable``).
    """

    def __init__(self, turns: Sequence[ClientTurn], module: Any) -> None:
        self.turns = list(turns)
        self.module = module
        self.slot_of = {t.client_id: k for k, t in enumerate(self.turns)}
        self.rows: ClientRows | None = None
        self.batches: list[Any] = []  # the group's batches: what its clients retrain on if a step raises
        self.aside = False  # a validation inside the group's steps: the module's own shapes (set_aside)
        self.raised = False  # a step raised: its clients train again one after another (group_retry)
        shared, personal = module.shared_parameters(), module.personal_parameters()
        lora = lora_parameter_ids(module.model)  # personal LoRA factors (FedPer's upper blocks) stack with the shared
        factors = {**shared, **{n: p for n, p in personal.items() if id(p) in lora}}
        self.stacked = StackedLora(module.model, factors, lambda: self.rows)
        self.heads = StackedHeads(personal_heads(module, personal), lambda: self.rows)  # personal linear heads
        self.shared_names = tuple(shared)
        self.personal = {n: p for n, p in personal.items() if n in factors or id(p) in self._head_ids()}

    def _head_ids(self) -> set[int]:
        return {id(p) for p in self.heads.params.values()}

    def _shared(self, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The shared parameters of a slot's views: what the turn's correction and upload read."""
        return {n: params[n] for n in self.shared_names}

    # ------------------------------------------------------------ what a turn's readers see
    @property
    def client_id(self) -> str:
        return ", ".join(str(t.client_id) for t in self.turns)

    @property
    def private(self) -> bool:
        return any(t.private for t in self.turns)

    @property
    def round_idx(self) -> int:
        return self.turns[0].round_idx

    @property
    def failed(self) -> bool:
        """A step raised: the group's remaining batches are skipped (the loop's failure guard reads it)."""
        return self.raised

    def fail(self) -> None:
        """A step of the group raised: one batch held every client's rows, so which client made it
        raise is not known here; the group's clients train again one after another at its end
        (:func:`~lightning_fed.batching.group_retry.train_alone`), and only one that fails alone is
        left out."""
        self.raised = True

    def failure_line(self, err: BaseException) -> str:
        """The run's line for a step of the group that raised (the loop's failure guard says it)."""
        who = f"{len(self.turns)} clients" if self.private else f"clients {self.client_id}"
        return (
            f"a step of {who} trained together failed in round {self.round_idx + 1}: {err!r}; each trains"
            " again alone, and only a client that fails alone is left out"
        )

    # ---------------------------------------------------------------------------- lifecycle
    def begin(self, trainer: Any, starts: Sequence[tuple[Any, Any]]) -> None:
        """Begin every turn with its ``(start, downlink)`` and stack their adapters."""
        for turn, (start, downlink) in zip(self.turns, starts):
            turn.begin(trainer, self.module, start, downlink)
            self.stacked.capture()
            self.heads.capture()
        self.stacked.stack()
        self.heads.stack()
        for opt in trainer.optimizers:  # the state of the stacked shapes starts empty
            opt.state.clear()
        for k, turn in enumerate(self.turns):
            turn.train_on(self._shared(self.stacked.views(k)))

    def start_step(self, batch: Any) -> None:
        """The rows of this step's batch, by each row's ``client_id``."""
        ids = batch["client_id"]
        self.batches.append(batch)
        self.rows = ClientRows.of([self.slot_of[int(c)] for c in ids.tolist()], len(self.turns), ids.device)

    def before_optimizer_step(self, lr: float) -> None:
        for k, turn in enumerate(self.turns):
            if corrects_gradients(turn):  # the slot's gradients, for the correction to read and change
                turn.train_on(self._shared(self.stacked.refresh_grads(k)))
            turn.before_optimizer_step(lr)

    def end_step(self, outputs: Any, accumulate: int) -> None:
        """After the optimizer step: each turn's weight correction and its own loss (``outputs``: the
        step's, :func:`~lightning_fed.batching.client_rows.per_client_loss`)."""
        losses = _client_losses(outputs)
        for turn in self.turns:
            turn.after_optimizer_step()  # on the slot's views: the step updated their data in place
            loss = losses.get(turn.client_id)
            if loss is not None and not turn.failed:
                turn.record_loss(loss / accumulate)

    def end(self, trainer: Any) -> list[ClientTurn]:
        """End every turn (each uploads its own slot), then unstack; returns the turns."""
        stacked = {n: p.data for n, p in self.personal.items()}
        try:
            for k, turn in enumerate(self.turns):
                turn.train_on(self._shared(self.stacked.views(k)))
                for n, p in self.personal.items():  # the module's personal parameters: the client's own, stored
                    p.data = stacked[n][k]
                turn.end(trainer, self.module)
        finally:
            for n, p in self.personal.items():
                p.data = stacked[n]
            self.close(trainer)
        return self.turns

    def set_aside(self) -> None:
        """A validation starts inside the group's steps (Lightning validates mid-epoch when a stop is
        requested, ``_should_check_val_fx``; ``trainer.val_check_interval`` mid-round, red team 10 row 2,
        is refused before torch now): its batches are the evaluation's, not the group's, so the module
        runs with its own shapes and forward, as at a round's end (where the group has ended), its
        values those it had before the group stacked (the last turn's start). :meth:`take_back` after."""
        self.stacked.set_aside()
        self.heads.set_aside()
        self.aside = True

    def take_back(self) -> None:
        """The group's stacked adapters, heads and forward again, as before :meth:`set_aside`."""
        self.stacked.take_back()
        self.heads.take_back()
        self.aside = False

    def close(self, trainer: Any) -> None:
        """The module as it was: its own parameter shapes and forward."""
        self.aside = False
        self.stacked.unstack()
        self.heads.unstack()
        for opt in trainer.optimizers:
            opt.state.clear()
        self.rows = None

    # ----------------------------------------------------------------- per-client clipping
    def clip_gradients(
        self, optimizer: Any, gradient_clip_val: float | None, gradient_clip_algorithm: str | None
    ) -> None:
        """Lightning's ``gradient_clip_val`` applied to each client's gradient on its own."""
        if not gradient_clip_val:
            return
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if gradient_clip_algorithm == "value":  # elementwise: per client already
            torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
            return
        stacked = {id(p) for p in self.stacked.params.values()} | self._head_ids()  # (K, ...): every trainable one
        clip_per_client([p for p in params if id(p) in stacked], gradient_clip_val)


def _client_losses(outputs: Any) -> dict[int, Any]:
    """Each client's loss in a step's output, by client id (none when the output does not say)."""
    if not isinstance(outputs, dict) or CLIENT_IDS not in outputs:
        return {}
    return {int(c): v for c, v in zip(outputs[CLIENT_IDS].tolist(), outputs[CLIENT_LOSSES])}


def corrects_gradients(turn: ClientTurn) -> bool:
    """Whether ``turn``'s strategy correction acts on the gradients (reads them per step)."""
    correction = turn.correction
    return correction is not None and type(correction).correct_gradients is not LocalCorrection.correct_gradients


@torch.no_grad()
def clip_per_client(params: Sequence[torch.Tensor], max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_`` applied to each client's slot (dim 0) on its own: the
    clip each client's sequential turn applies to its gradient."""
    if not params:
        return
    norms = torch.stack([torch.linalg.vector_norm(p.grad.flatten(1), dim=1) for p in params])  # (P, K)
    total = torch.linalg.vector_norm(norms, dim=0)  # (K,)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in params:
        p.grad.mul_(coef.view(-1, *([1] * (p.grad.dim() - 1))).to(p.grad.dtype))


def warn_fallback(batch_clients: Any, reason: str) -> None:
    """The one line that says why a run with ``federation.batch_clients`` trains sequentially
    (:func:`~lightning_fed.batching.fallback.fallback_line`, as ``lightning-fed plan`` says it)."""
    rank_zero_warn(fallback_line(batch_clients, reason))
