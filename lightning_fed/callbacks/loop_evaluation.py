"""The evaluation half of :class:`~lightning_fed.callbacks.FederatedLoop`, a part it holds
(``loop.evaluator``) and hands Lightning's validation and test hooks to.

During ``fit``, Lightning's validation after a round evaluates the new global state on the
clients of the :class:`~lightning_fed.federation.evaluation_plan.EvaluationPlan` (the initial
evaluation is Lightning's sanity check, on the same rule), each batch with its client's
personal state, and the per-client metrics go to the run's
:class:`~lightning_fed.federation.report.RoundReport`. A standalone ``validate``/``test`` run
is an :class:`~lightning_fed.callbacks.evaluation_stage.EvaluationStage` with its own results file,
except in a private run (:attr:`~lightning_fed.federation.report.RoundReport.withhold_validation`):
then ``validate`` and ``test`` write nothing computed on the clients' validation or test data.

A validation inside a client's turn (``trainer.val_check_interval`` a count inside a round, clients
trained one after another) swaps the validated clients' personal states in over the training
client's, whose own are in no store until its turn ends: they are kept aside for the validation
(:meth:`LoopEvaluation.keep_training_client`; its own batches scored with them) and put back at its
end, so the client goes on training with its own (a group of clients trained together sets its
stacked state aside itself: :meth:`~lightning_fed.batching.grouped_driver.GroupedTurns.on_validation_start`).

Such a validation comes from Lightning alone since ``trainer.val_check_interval`` is refused other than
the whole round (:func:`~lightning_fed.loop_conflicts.val_check_problem`): a stop requested inside a
round (``trainer.should_stop`` set by a user's callback, an ``EarlyStopping`` on a training metric
checked per batch) makes Lightning validate after that batch (its ``_should_check_val_fx``), then end
the epoch before the round's aggregation. The module then holds the training client's local model, not
a global one; 628d0d2 recorded it as the round's (``current_epoch + 1``): TensorBoard's
``round/val_*`` and Lightning's ``val/*`` (what a checkpoint's monitor and early stopping read) of a
round that never closed. A validation before the current round's record exists is now recorded nowhere
(a warning says so); the last completed round's record stands, and so does ``summary.json``'s ``final``.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn
from typing_extensions import override

from lightning_fed.callbacks.evaluation_stage import EvaluationStage
from lightning_fed.federation.evaluation_plan import EvaluationPlan, packs_evaluation
from lightning_fed.federation.server_round import ServerRound
from lightning_fed.federation.store import ClientStateStore
from lightning_fed.state import StateDict, clone_state


class LoopEvaluation(Callback):
    """Lightning's validation and test hooks of the federated loop (see the module docstring).

    Args:
        server: The run's server half (its report records the evaluations).
        store: Where the clients' personal states are kept.
        evaluation: Which clients each evaluation covers.

    The run's ``trainer``, ``module``, ``datamodule`` and ``initial_personal`` (the personal
    parameters as initialised; empty for a module without personal parameters) are given by
    :meth:`bind` when fit, validate or test sets up.
    """

    def __init__(self, server: ServerRound, store: ClientStateStore, evaluation: EvaluationPlan) -> None:
        self.server, self.store, self.evaluation = server, store, evaluation
        self.trainer: pl.Trainer | None = None
        self.module: pl.LightningModule | None = None
        self.datamodule: Any = None
        self.initial_personal: StateDict = {}
        self._kept: tuple[int, StateDict] | None = None  # the training client's personal state (module docstring)

    def bind(
        self, trainer: pl.Trainer, module: pl.LightningModule, datamodule: Any, initial_personal: StateDict
    ) -> None:
        """Attach the run (``initial_personal``: what a client without a personal state of its own uses)."""
        self.trainer, self.module, self.datamodule = trainer, module, datamodule
        self.initial_personal = initial_personal

    @staticmethod
    def _standalone(trainer: pl.Trainer) -> bool:
        """Whether this is a ``validate``/``test`` run (not the validation inside ``fit``)."""
        return trainer.state.fn in (TrainerFn.VALIDATING, TrainerFn.TESTING)

    def evaluation_layout(self) -> tuple[list[int], bool]:
        """The clients the evaluation starting now covers, and whether its batches may mix clients.

        In ``fit``: :meth:`EvaluationPlan.clients_for` of the current round (for the initial
        evaluation, round 1's); in ``validate``/``test``: of the checkpoint's last round.
        """
        trainer = self.trainer
        standalone = self._standalone(trainer)
        round_idx = max(len(self.server.report.history) - 1, 0) if standalone else trainer.current_epoch
        clients = self.evaluation.clients_for(self.server, round_idx, standalone)
        return clients, packs_evaluation(self.module, bool(self.initial_personal), trainer.callbacks)

    def keep_training_client(self, pl_module: pl.LightningModule, client_id: int) -> None:
        """A validation starts inside ``client_id``'s turn: keep its personal parameters as they are now
        (put back by :meth:`on_validation_end`; the store holds them only once its turn ends)."""
        if self.initial_personal:
            self._kept = (client_id, clone_state(pl_module.personal_parameters()))

    def _load_client(self, pl_module: pl.LightningModule, batch: Any) -> None:
        """Swap in the personal state of the batch's client (all of a batch is one client's)."""
        if self.initial_personal and "client_id" in batch:
            cid = int(batch["client_id"][0])
            if self._kept is not None and self._kept[0] == cid:  # the training client: its state in training
                pl_module.load_state(self._kept[1])
            else:
                pl_module.load_state(self.store.get(cid)["personal"] or self.initial_personal)

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._kept is not None:  # the training client goes on with its own personal parameters
            kept, self._kept = self._kept[1], None
            pl_module.load_state(kept)

    @override
    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._load_client(pl_module, batch)

    def _start_stage(self, pl_module: pl.LightningModule, stage: str, data: str) -> None:
        """Start a standalone ``validate``/``test``; in a private run, none (a warning says why)."""
        self._stage = None
        if self.server.report.withhold_validation:  # a private run: the clients' validation/test data
            rank_zero_warn(
                f"{stage}: with differential privacy on, nothing computed on the clients' {data} data is"
                " written (federation.privacy.report_validation: true opts in, unprotected); nothing written"
            )
        else:
            self._stage = EvaluationStage(self.server, self.datamodule, pl_module)

    @override
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._standalone(trainer):
            self._start_stage(pl_module, "validate", "validation")
        else:
            self.server.report.start_eval()

    @override
    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._standalone(trainer):
            from lightning_fed.evaluation.test_step import extra_metrics

            if self._stage is None:
                return
            self._stage.add(
                batch, {**(outputs if isinstance(outputs, dict) else {}), **extra_metrics(pl_module, batch)}
            )
        elif isinstance(outputs, dict) and "client_id" in batch:
            self.server.report.add_eval(batch["client_id"], outputs)

    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._standalone(trainer):
            if self._stage is not None:
                self._stage.finish(trainer, pl_module, "validate")
        elif trainer.sanity_checking:
            if not self.server.report.history:  # a resumed run keeps the initial evaluation it restored
                self.server.report.end_eval(trainer, pl_module, round_number=0, initial=True)
        elif len(self.server.report.history) == trainer.current_epoch + 1:  # the round's aggregation done
            self.server.report.end_eval(trainer, pl_module, round_number=trainer.current_epoch + 1)
        else:  # a stop requested inside the round (module docstring): no round's record
            rank_zero_warn(
                f"round {trainer.current_epoch + 1}: the validation Lightning ran on a stop requested inside the"
                " round is not recorded (the module held a client's local model, not a global one); the last"
                " completed round's record stands"
            )

    @override
    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start_stage(pl_module, "test", "test")

    @override
    def on_test_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._load_client(pl_module, batch)

    @override
    def on_test_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if self._stage is not None:
            self._stage.add(batch, outputs if isinstance(outputs, dict) else {})

    @override
    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._stage is not None:
            self._stage.finish(trainer, pl_module, "test")
