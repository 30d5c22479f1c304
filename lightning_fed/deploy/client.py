"""One client's turn on its own machine, through the same code as the simulation.

:class:`ClientLoop` is the :class:`~lightning_fed.federation.TurnDriver` of a single remote
client in a single round: it lays out that client's batches and drives its
:class:`~lightning_fed.federation.ClientTurn` from the state the server sent, exactly like the
in-process :class:`~lightning_fed.callbacks.FederatedLoop` drives each sampled client's turn
(loading the start and personal state, clearing the optimizer, seeding by
``(seed, round, client)``, the strategy's :class:`~lightning_fed.strategies.LocalCorrection`,
what is uploaded), which is why a Flower run and an in-process run of the same config reach
the same state.

:class:`ClientRunner` owns the module and the data of one machine and runs a fresh
Lightning ``Trainer`` per round, positioned at the round's epoch so that round-dependent
schedules (FedPDPO's ``w_r``) see the right round. It answers the round hooks' pre-round
queries (:meth:`ClientRunner.answer`) and runs their ``prepare_client`` with the server's
instructions before laying out the turn (:meth:`ClientRunner.train`).

In a private run (differential privacy on) a client's evaluation reply follows the rule of the
in-process run's report (:class:`~lightning_fed.federation.report.RoundReport`): without
``federation.privacy.report_validation`` nothing computed on the client's validation data leaves
it (no metric, a count of 0: the client does not even evaluate); with it, its metric means and
its validation count bucketed to a power of two (:func:`~lightning_fed.federation.report.bucket_count`),
never the exact count (:meth:`ClientRunner.evaluate`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from typing_extensions import override

from lightning_fed import run_factory
from lightning_fed.allocator import keep_heap
from lightning_fed.datamodules.federated import FederatedDataModule
from lightning_fed.federation.driver import TurnDriver
from lightning_fed.federation.hooks import Payload, answer_query, prepare_client
from lightning_fed.federation.report import RoundReport, bucket_count
from lightning_fed.federation.round_plan import FixedPlan, RoundPlan, poisson_batch_seed
from lightning_fed.federation.store import ClientStateStore
from lightning_fed.federation.turn import ClientTurn, TurnPlan, turn_batches
from lightning_fed.heterogeneity.system_round import CUT_SHORT, LOCAL_STEPS, instructed_budget, instructed_steps
from lightning_fed.modules.base import FederatedModule
from lightning_fed.planning.group import needs_kept_heap
from lightning_fed.privacy.run import privacy_enabled
from lightning_fed.run import FederatedRun
from lightning_fed.state import StateDict, clone_state
from lightning_fed.strategies.base import ClientUpdate
from lightning_fed.strategies.lora_factors import match_rank

# Trainer settings a client takes from the run's config; the rest (loggers, checkpoints,
# progress bars, validation) is the server's business.
CLIENT_TRAINER_KEYS = (
    "accelerator",
    "precision",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "deterministic",
)


class ClientLoop(TurnDriver):
    """Drives one remote client's :class:`ClientTurn` inside a ``fit`` of one round.

    Args:
        turn: The turn (client, round, strategy, the client's store, hooks).
        num_batches: Batches of the turn (laid out after the hooks' ``prepare_client``).
        start: The shared state the server sent. downlink: the strategy's downlink extras.
        run: The run (what modules read through the driver, e.g. FedRep's ``run.local_steps``).
    """

    def __init__(
        self,
        turn: ClientTurn,
        num_batches: int,
        start: StateDict,
        downlink: StateDict,
        run: FederatedRun,
        stop_at: float | None = None,
    ) -> None:
        super().__init__(run)
        self._next, self.start, self.downlink = turn, start, downlink
        self.plan = TurnPlan(turn.client_id, num_batches)
        self.stop_at = stop_at  # time.monotonic() past which no further local step starts (wall budget)
        self.cut_short = False  # the budget ended the turn before its planned steps
        self._steps_before = 0

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        r = self._next.round_idx  # DP-SGD: Poisson batches from the client's own secret
        plan = RoundPlan(r, (self.plan.client_id,), (self.plan,), batch_seed=poisson_batch_seed(pl_module, r))
        trainer.datamodule.connect(FixedPlan(plan))
        trainer.fit_loop.max_epochs = self._next.round_idx + 1  # the Trainer stands at this round's epoch
        trainer.reload_dataloaders_every_n_epochs = 1

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if needs_kept_heap(pl_module, trainer.datamodule, 1):  # glibc would map them afresh each step
            keep_heap(pl_module.device)

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.lay_out([self.plan])

    @override
    def start_turn(self, trainer: pl.Trainer, pl_module: pl.LightningModule, plan: TurnPlan) -> ClientTurn:
        self._next.begin(trainer, pl_module, self.start, self.downlink)
        return self._next

    @override
    def end_turn(self, trainer: pl.Trainer, pl_module: pl.LightningModule, turn: ClientTurn) -> None:
        pass  # the runner reads turn.update

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
        self._steps_before = self.turn.steps if self.turn is not None else 0

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        turn = self.turn
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        stepped = turn is not None and turn.steps > self._steps_before  # an optimizer step ended here
        if self.turn is turn and stepped and self.stop_at is not None and time.monotonic() >= self.stop_at:
            # The time budget is spent: the turn ends with the steps it finished (FedProx's inexact
            # update, Li et al., 2020, arXiv:1812.06127), at least one, and the fit stops.
            self.turn, self.last_turn, self.cut_short = None, turn, True
            turn.end(trainer, pl_module)
            self.end_turn(trainer, pl_module, turn)
            trainer.should_stop = True


class _EvalCollector(pl.Callback):
    """Averages the per-example validation outputs of one client."""

    def __init__(self) -> None:
        self.report = RoundReport()
        self.report.start_eval()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:  # noqa: ANN001
        if isinstance(outputs, dict) and "client_id" in batch:
            self.report.add_eval(batch["client_id"], outputs)


class ClientRunner:
    """Trains and evaluates the clients a machine holds, one turn at a time.

    Args:
        module: The local objective (its backbone stays loaded between rounds).
        datamodule: The federated data; this machine uses only its clients' part.
        run: The run (:class:`~lightning_fed.run.FederatedRun`: rounds, local steps or
            epochs, compression, the strategy's client side, the round hooks' client half).
        seed: The federation seed as the server resolved it (default: ``run.seed``, else the
            run's ``seed_everything`` value: :func:`~lightning_fed.run_factory.resolved_seed`).
        trainer_kwargs: Extra ``Trainer`` arguments for local training (precision...).
    """

    def __init__(
        self,
        module: FederatedModule,
        datamodule: FederatedDataModule,
        run: FederatedRun,
        seed: int | None = None,
        trainer_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.module, self.datamodule = module, datamodule
        self.run = run  # read, never copied: strategy, hooks, local work, privacy
        self.seed = run_factory.resolved_seed(run) if seed is None else seed  # as ServerRound.seed
        self.trainer_kwargs = {
            k: v for k, v in (trainer_kwargs or {}).items() if k in CLIENT_TRAINER_KEYS and v is not None
        }
        if getattr(datamodule, "tokenizer", None) is None:
            datamodule.tokenizer = module.tokenizer
        datamodule.private = privacy_enabled(run.strategy, module)  # a private run logs no per-client figure
        if datamodule.private:  # no record of which examples were trained on (e.g. DPO's reference cache)
            module.keep_no_example_record()
        datamodule.setup("fit")
        # Personal parameters as initialised: what a client without personal state yet uses.
        self.initial_personal = clone_state(module.personal_parameters())
        for hook in run.hooks:  # the hooks' client half, once per client process
            hook.setup_client(module)

    def _trainer(self, round_idx: int, callbacks: list[pl.Callback]) -> pl.Trainer:
        trainer = pl.Trainer(
            devices=1,
            max_epochs=round_idx + 1,
            use_distributed_sampler=False,  # the round plan lays out this client's batches
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            callbacks=callbacks,
            **self.trainer_kwargs,
        )
        # A fresh Trainer starts at epoch 0; put it at the round so `current_epoch` (seeds,
        # round schedules) is the same as in the simulation.
        progress = trainer.fit_loop.epoch_progress
        for counter in (progress.current, progress.total):
            counter.ready = counter.started = counter.processed = counter.completed = round_idx
        return trainer

    def answer(
        self, hook_index: int, client_id: int, round_idx: int, query: Payload, state: StateDict | None
    ) -> Payload:
        """The answer of ``client_id`` to hook ``hook_index``'s pre-round query (``state``: the
        global state the query asked for, loaded first; ``None`` if it asked for none)."""
        self._check_client(client_id)
        data = self.datamodule.client(client_id)
        return answer_query(self.run.hooks, hook_index, self.module, data, client_id, round_idx, query, state)

    def train(
        self,
        round_idx: int,
        client_id: int,
        state: StateDict,
        downlink: StateDict,
        entry: dict[str, StateDict],
        instructions: Mapping[int, Payload] | None = None,
        received: float | None = None,
    ) -> tuple[ClientUpdate, dict[str, StateDict]]:
        """Local training of ``client_id`` in round ``round_idx`` (0-based) from ``state``.

        ``entry`` is what the client kept from earlier rounds (``{"personal", "memory"}``);
        ``instructions`` the hooks' per-client payloads (by hook index), given to their
        ``prepare_client`` before the turn is laid out. A wall-clock time budget among them
        (:func:`~lightning_fed.heterogeneity.system_round.instructed_budget`) runs from ``received``
        (``time.monotonic()`` when the message arrived; default: now): past it no further local
        step starts, and the update reports its ``local_steps``. Returns the update to upload and
        the entry to keep.
        """
        received = time.monotonic() if received is None else received
        self._check_client(client_id)
        store = ClientStateStore()
        store.load_state_dict({client_id: entry})
        data = self.datamodule.client(client_id)
        self.module.load_state(
            match_rank(state, self.module.shared_parameters())
        )  # prepare_client sees the state the server sent, as in-process
        prepare_client(self.run.hooks, self.module, data, client_id, round_idx, instructions or {})
        num_examples = self.datamodule.client_sizes[client_id]
        turn = run_factory.client_turn(
            self.run, client_id, round_idx, store, num_examples, self.initial_personal, self.module, self.seed
        )
        # Lightning's accumulation and a manual-optimization module's own, as in the simulation.
        accumulate = int(self.trainer_kwargs.get("accumulate_grad_batches", 1))
        accumulate *= int(getattr(self.module, "accumulate_grad_batches", 1))
        steps = instructed_steps(dict(instructions or {}), self.run.local_steps)  # a straggler's partial work
        batches = turn_batches(steps, self.run.local_epochs, num_examples, self.datamodule.batch_size, accumulate)
        # The client side of the strategy as the simulation sets it up (e.g. its client count).
        self.run.strategy.setup(clone_state(self.module.shared_parameters()), self.datamodule.num_clients)
        budget = instructed_budget(dict(instructions or {}))
        stop_at = None if budget is None else received + budget
        loop = ClientLoop(turn, batches, state, downlink, self.run, stop_at)
        self._trainer(round_idx, [loop]).fit(self.module, datamodule=self.datamodule)
        if turn.update is None:
            raise RuntimeError(f"client {client_id} produced no update in round {round_idx + 1}")
        if budget is not None:  # what the server counts as partial work
            turn.update.metrics.update({LOCAL_STEPS: float(turn.steps), CUT_SHORT: float(loop.cut_short)})
        return turn.update, store.get(client_id)

    @torch.no_grad()
    def evaluate(
        self,
        client_id: int,
        state: StateDict,
        entry: dict[str, StateDict],
        instructions: Mapping[int, Payload] | None = None,
    ) -> tuple[dict[str, float], int]:
        """The per-example means of the module's validation metrics on the client's val split and
        its number of examples (``instructions``: the hooks' evaluation payloads by hook index, for
        their ``prepare_evaluation``).

        In a private run: ``({}, 0)`` unless ``federation.privacy.report_validation``, and then the
        count bucketed (the in-process report's rule; see the module docstring).
        """
        self._check_client(client_id)
        private = run_factory.is_private(self.run, self.module)
        if private and not (self.run.privacy is not None and self.run.privacy.report_validation):
            return {}, 0
        self.module.load_state(match_rank(state, self.module.shared_parameters()))  # a rank-r_k client: padded
        if entry.get("personal"):
            self.module.load_state(entry["personal"])
        for i, hook in enumerate(self.run.hooks):
            hook.prepare_evaluation(self.module, client_id, dict((instructions or {}).get(i, {})))
        data = self.datamodule.client(client_id)
        if len(data.val_set) == 0:
            return {}, 0
        collector = _EvalCollector()
        trainer = pl.Trainer(
            devices=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[collector],
            **self.trainer_kwargs,
        )
        trainer.validate(self.module, dataloaders=data.val_dataloader(), verbose=False)
        means, count = collector.report.client_means(client_id)
        return (means, bucket_count(count)) if private and count else (means, count)

    def _check_client(self, client_id: int) -> None:
        if not 0 <= client_id < self.datamodule.num_clients:
            raise ValueError(f"client-id must be in [0, {self.datamodule.num_clients}), got {client_id}")
