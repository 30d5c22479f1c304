"""FederatedLoop: runs federated rounds inside one Lightning ``fit``.

One round is one Lightning epoch. Its batches are the sampled clients' local batches laid
out one client after another (see :class:`~lightning_fed.datamodules.RoundBatchSampler`).
At each client boundary this callback swaps the client's trainable state in (the global
shared state plus the client's personal state) and the previous client's update out; after
the round's last batch it aggregates with the strategy and loads the new global state, so
Lightning's validation at the end of the epoch evaluates the global model. Everything else
(optimisation, precision, devices, logging, checkpoint files) is Lightning's own.
"""

from __future__ import annotations

import math
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_fed.callbacks.failures import guard_training_step, unguard_training_step
from lightning_fed.callbacks.reporting import RoundReport
from lightning_fed.federation.hooks import RoundHook
from lightning_fed.federation.sampling import ClientTurn, derive_seed, sample_clients
from lightning_fed.federation.screening import UpdateScreen
from lightning_fed.federation.server_round import ServerRound
from lightning_fed.federation.store import ClientStateStore
from lightning_fed.state import StateDict, clone_state, state_nbytes
from lightning_fed.strategies.base import AggregationError, ClientUpdate, LocalCorrection, Strategy
from lightning_fed.strategies.fedavg import FedAvg


class FederatedLoop(ServerRound, Callback):
    """Orchestrates federated rounds over a :class:`~lightning_fed.datamodules.FederatedDataModule`.

    Args:
        rounds: Number of communication rounds (sets ``trainer.max_epochs``).
        clients_per_round: Clients sampled uniformly without replacement each round.
        local_steps: Optimizer steps per client per round (K). Exclusive with ``local_epochs``.
        local_epochs: Passes over the client's data per round instead of fixed steps.
        strategy: Server aggregation rule (default: FedAvg weighted by ``|D_k|``).
        min_clients: A round fails unless at least this many clients return a valid update.
        isolate_failures: Leave a client that raises during local training out of the round
            (with a warning and a counter) instead of stopping the run.
        hooks: Round-level method hooks (data selection, server-side training...).
        seed: Seed of client sampling and of local randomness (default: the run's
            ``seed_everything`` value).
        max_state_memory_bytes: Keep at most this many bytes of per-client state in memory;
            the rest goes to ``state_offload_dir``.
        state_offload_dir: Folder for per-client state past the memory budget.
        save_adapter: Write the final global adapter as a PEFT folder at the end of fit.
        max_update_norm: Bound on the L2 norm of a client's change ``w_k - w``; a larger (e.g.
            poisoned, scaled) update is handled per ``on_large_update``. ``None``: no bound.
        on_large_update: ``reject`` such an update (counted as rejected) or ``clip`` its change
            to ``max_update_norm`` (counted as clipped).
    """

    def __init__(
        self,
        rounds: int = 10,
        clients_per_round: int = 2,
        local_steps: int | None = 10,
        local_epochs: int | None = None,
        strategy: Strategy | None = None,
        min_clients: int = 1,
        isolate_failures: bool = True,
        hooks: list[RoundHook] | None = None,
        seed: int | None = None,
        max_state_memory_bytes: int | None = None,
        state_offload_dir: str | None = None,
        save_adapter: bool = True,
        max_update_norm: float | None = None,
        on_large_update: str = "reject",
    ) -> None:
        problems = []
        if rounds < 1:
            problems.append(f"federation.rounds must be >= 1, got {rounds}")
        if clients_per_round < 1:
            problems.append(f"federation.clients_per_round must be >= 1, got {clients_per_round}")
        if (local_steps is None) == (local_epochs is None):
            problems.append(
                f"set exactly one of federation.local_steps and federation.local_epochs, got {local_steps} and {local_epochs}"
            )
        elif (steps := local_steps if local_steps is not None else local_epochs) < 1:
            name = "local_steps" if local_steps is not None else "local_epochs"
            problems.append(f"federation.{name} must be >= 1, got {steps}")
        if clients_per_round >= 1 and not 1 <= min_clients <= clients_per_round:  # else already reported
            problems.append(
                f"federation.min_clients must be in [1, clients_per_round={clients_per_round}], got {min_clients}"
            )
        if problems:
            raise ValueError("; ".join(problems))
        self.rounds, self.clients_per_round = rounds, clients_per_round
        self.local_steps, self.local_epochs = local_steps, local_epochs
        self.strategy = strategy or FedAvg()
        self.min_clients, self.isolate_failures = min_clients, isolate_failures
        self.hooks = list(hooks or [])
        self._seed = seed
        self.save_adapter = save_adapter
        self.screen = UpdateScreen(max_update_norm, on_large_update)
        self.clipped_updates = 0
        self.store = ClientStateStore(max_state_memory_bytes, state_offload_dir)
        self.report = RoundReport()
        self.global_state: StateDict = {}
        self.failed_clients = 0
        self.rejected_updates = 0
        self._plans: dict[int, list[ClientTurn]] = {}
        self._extra_bytes = [0, 0]  # [up, down] added by hooks, reset when a round is reported
        self._reset_round_buffers()

    # ===================================================================== setup and plan
    @property
    def seed(self) -> int:
        if self._seed is None:
            import os

            self._seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        return self._seed

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        from lightning_fed.datamodules.federated import FederatedDataModule
        from lightning_fed.modules.base import FederatedModule

        if not isinstance(pl_module, FederatedModule):
            raise TypeError(f"FederatedLoop needs a lightning_fed FederatedModule, got {type(pl_module).__name__}")
        dm = trainer.datamodule
        if not isinstance(dm, FederatedDataModule):
            raise TypeError(f"FederatedLoop needs a FederatedDataModule, got {type(dm).__name__}")
        self.trainer, self.module, self.datamodule = trainer, pl_module, dm
        if self.clients_per_round > dm.num_clients:
            raise ValueError(
                f"federation.clients_per_round={self.clients_per_round} exceeds data.num_clients={dm.num_clients}"
            )
        # Personal parameters as initialised: what a client without personal state yet uses.
        self._initial_personal = clone_state(pl_module.personal_parameters())
        if stage != "fit":
            return  # `validate`/`test`: the federation state comes from the checkpoint (on_load_checkpoint)
        dm.round_plan = self.plan_round
        trainer.fit_loop.max_epochs = self.rounds
        trainer.reload_dataloaders_every_n_epochs = 1  # each round lays out its own batches
        # The round loader is rank-aware itself (RoundBatchSampler splits each global batch over
        # the DDP processes); a DistributedSampler injected by Lightning would break the layout.
        trainer._accelerator_connector.use_distributed_sampler = False
        self.global_state = clone_state(pl_module.shared_parameters())
        if not self.global_state:
            raise ValueError(f"{type(pl_module).__name__} has no shared parameters: nothing to federate")
        self.strategy.setup(self.global_state, dm.num_clients)
        self.report.set_clients(dm.client_sizes, [len(c.val_set) for c in dm.clients])
        guard_training_step(self, pl_module)  # a raising client is left out; undone in teardown

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fit_started = True
        for hook in self.hooks:
            hook.setup(self, trainer, pl_module)

    def plan_round(self, round_idx: int) -> list[ClientTurn]:
        """Prepare round ``round_idx`` (sample clients, run round-start hooks) and lay out its turns.

        Called when the round's dataloader is built; idempotent for a given round.
        """
        if round_idx not in self._plans:
            clients = sample_clients(self.datamodule.num_clients, self.clients_per_round, self.seed, round_idx)
            # On resume Lightning may first build the loader of the round the checkpoint closed;
            # that round's hooks have already run and must not run twice.
            if round_idx >= len(self.report.history):
                for hook in self.hooks:
                    hook.on_round_start(self, self.trainer, self.module, round_idx, clients)
            self._plans = {round_idx: [ClientTurn(c, self._num_batches(c)) for c in clients]}
        return self._plans[round_idx]

    def _num_batches(self, client_id: int) -> int:
        # Lightning's accumulate_grad_batches, or a manual-optimization module's own (which
        # Lightning forbids on the Trainer), e.g. PDPOModule.accumulate_grad_batches.
        accumulate = self.trainer.accumulate_grad_batches * int(getattr(self.module, "accumulate_grad_batches", 1))
        if self.local_steps is not None:
            return self.local_steps * accumulate
        n, b = self.datamodule.client_sizes[client_id], self.datamodule.batch_size
        # Whole accumulation windows: Lightning counts them over the round's batch stream, so
        # a window must never span two clients (their gradients would be summed).
        return accumulate * math.ceil(self.local_epochs * math.ceil(n / b) / accumulate)

    def turn_progress(self, batch_idx: int) -> tuple[int, int]:
        """(position of ``batch_idx`` within its client's turn, number of batches of the turn),
        for a module whose local schedule depends on it (e.g. FedPDPO's phased epochs)."""
        i, _, _ = self._turn_at(batch_idx)
        end = self._turn_ends[i]
        return batch_idx - (end - self._turns[i].num_batches), self._turns[i].num_batches

    # ============================================================ client turns (training)
    def _reset_round_buffers(self) -> None:
        self._turn_ends: list[int] = []
        self._turn: ClientTurn | None = None
        self._updates: list[ClientUpdate] = []
        self._received: dict[int, Any] = {}  # client -> the shared state it started from
        self._round_failed: list[int] = []
        self._round_rejected: dict[int, str] = {}
        self._up = self._down = 0

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._reset_round_buffers()
        turns = self.plan_round(trainer.current_epoch)
        ends, total = [], 0
        for t in turns:
            total += t.num_batches
            ends.append(total)
        self._turns, self._turn_ends = turns, ends
        self._round_t0 = time.perf_counter()

    def _turn_at(self, batch_idx: int) -> tuple[int, bool, bool]:
        """(turn index, is first batch of the turn, is last batch of the turn)."""
        for i, end in enumerate(self._turn_ends):
            if batch_idx < end:
                start = end - self._turns[i].num_batches
                return i, batch_idx == start, batch_idx == end - 1
        raise RuntimeError(f"batch {batch_idx} is past the round's planned {self._turn_ends[-1]} batches")

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        i, first, _ = self._turn_at(batch_idx)
        if first:
            self._start_client(trainer, pl_module, self._turns[i])

    def _start_client(self, trainer: pl.Trainer, pl_module: pl.LightningModule, turn: ClientTurn) -> None:
        cid = turn.client_id
        self._turn, self._client_failed, self._steps, self._losses = turn, False, 0, []
        entry = self.store.get(cid)
        start, downlink = self.client_start(cid)
        pl_module.load_state(start)
        pl_module.load_state(entry["personal"] or self._initial_personal)
        for opt in trainer.optimizers:  # optimizer state never leaks between clients
            opt.state.clear()
        torch.manual_seed(derive_seed(self.seed, trainer.current_epoch, cid))
        self._correction: LocalCorrection = self.strategy.local_correction(start, downlink, entry["memory"])
        self._memory = entry["memory"]
        self._shared_params = pl_module.shared_parameters()
        self._received[cid] = start
        self._down += state_nbytes(start) + state_nbytes(downlink)
        for hook in self.hooks:
            hook.on_client_start(self, trainer, pl_module, cid)

    @override
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if self._turn is None or self._client_failed:
            return
        self._correction.correct_gradients(self._shared_params)
        self._steps += 1
        self._step_lr = optimizer.param_groups[0]["lr"]  # for the correction after the step

    def _after_optimizer_step(self) -> None:
        """A correction applied to the weights after an optimizer step (SCAFFOLD ``parameter``)."""
        lr, self._step_lr = getattr(self, "_step_lr", None), None
        if lr is not None and self._turn is not None and not self._client_failed:
            self._correction.after_optimizer_step(self._shared_params, lr)

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._after_optimizer_step()
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            self._losses.append(float(loss))
        _, _, last = self._turn_at(batch_idx)
        if last:
            self._end_client(trainer, pl_module)
            if batch_idx == self._turn_ends[-1] - 1:
                self._aggregate(trainer, pl_module)

    def _end_client(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        cid = self._turn.client_id
        if self._client_failed:
            self.failed_clients += 1
            self._round_failed.append(cid)
            self._turn = None
            return
        # A client returns new values of exactly what it received (all of the global state
        # by default; a clustered strategy may send a client only its cluster's part).
        shared = clone_state({k: self._shared_params[k] for k in self._received[cid]})
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else 0.0
        extras = self._correction.finish(shared, self._steps, lr) if self._steps else {}
        self.store.put(cid, pl_module.personal_parameters(), self._memory)
        metrics = {"train_loss": sum(self._losses) / len(self._losses)} if self._losses else {}
        update = ClientUpdate(cid, self.datamodule.client_sizes[cid], shared, extras, metrics)
        self._up += state_nbytes(update.state) + state_nbytes(update.extras)
        for hook in self.hooks:
            hook.on_client_end(self, trainer, pl_module, update)
        self._updates.append(update)
        self._turn = None

    # ======================================================================== aggregation
    def _aggregate(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        round_idx = trainer.current_epoch
        valid = []
        for update in self._updates:
            try:
                valid.append(self.admit(self._received[update.client_id], update))
            except AggregationError as err:
                self.rejected_updates += 1
                self._round_rejected[update.client_id] = str(err)
                rank_zero_warn(f"round {round_idx + 1}: update rejected: {err}")
        self._updates, self._received = [], {}  # not kept alive through evaluation
        self.advance(trainer, pl_module, round_idx, valid, len(self._turns), self._round_failed, self._round_rejected)
        extra_up, extra_down = self.take_extra_bytes()
        self.report.end_round(
            trainer,
            round_idx,
            clients=[t.client_id for t in self._turns],
            updates=valid,
            failed=self._round_failed,
            rejected=self._round_rejected,
            up_bytes=self._up + extra_up,
            down_bytes=self._down + extra_down,
            seconds=time.perf_counter() - self._round_t0,
        )

    # ========================================================================= evaluation
    @staticmethod
    def _standalone(trainer: pl.Trainer) -> bool:
        """Whether this is a ``validate``/``test`` run (not the validation inside ``fit``)."""
        return trainer.state.fn in (TrainerFn.VALIDATING, TrainerFn.TESTING)

    def _load_client(self, pl_module: pl.LightningModule, batch: Any) -> None:
        """Swap in the personal state of the batch's client (all of a batch is one client's)."""
        if self._initial_personal and "client_id" in batch:
            cid = int(batch["client_id"][0])
            pl_module.load_state(self.store.get(cid)["personal"] or self._initial_personal)

    @override
    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._load_client(pl_module, batch)

    @override
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._standalone(trainer):
            self._start_stage(pl_module)
        else:
            self.report.start_eval()

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

            self._add_stage(
                batch, {**(outputs if isinstance(outputs, dict) else {}), **extra_metrics(pl_module, batch)}
            )
        elif isinstance(outputs, dict) and "client_id" in batch:
            self.report.add_eval(batch["client_id"], outputs)

    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._standalone(trainer):
            self._end_stage(trainer, pl_module, "validate")
        elif trainer.sanity_checking:
            if not self.report.history:  # a resumed run keeps the initial evaluation it restored
                self.report.end_eval(trainer, pl_module, round_number=0, initial=True)
        else:
            self.report.end_eval(trainer, pl_module, round_number=trainer.current_epoch + 1)

    # ----------------------------------------------- `validate` and `test` after `fit`
    @override
    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start_stage(pl_module)

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
        self._add_stage(batch, outputs if isinstance(outputs, dict) else {})

    @override
    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._end_stage(trainer, pl_module, "test")

    def _start_stage(self, pl_module: pl.LightningModule) -> None:
        from lightning_fed.evaluation.stage_results import StageResults

        if self.global_state:  # restored from the checkpoint, or left by a fit in this process
            pl_module.load_state(self.global_state)
        self._stage = StageResults()

    def _add_stage(self, batch: Any, outputs: dict[str, Any]) -> None:
        if "client_id" in batch:
            self._stage.add(batch["client_id"], outputs, batch.get("group_id"))

    def _end_stage(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Write ``<run>/<stage>_results.json`` and log the metrics (TensorBoard, the results table)."""
        from lightning_fed.evaluation.stage_results import results_dir, write_results

        dm = self.datamodule
        results = self._stage.summary(getattr(dm, "group_names", None))
        dataset = (
            dm.test_dataset
            if stage == "test"
            else (dm.val_dataset or f"{dm.dataset} (data.val_fraction={dm.val_fraction})")
        )
        round_number = len(self.report.history)
        results = {
            "stage": stage,
            "checkpoint": trainer.ckpt_path,
            "round": round_number,
            "dataset": dataset,
            **results,
        }
        if hasattr(dm, "data_report"):
            results["data"] = dm.data_report()
        if self.global_state:
            pl_module.load_state(self.global_state)
        if not results["num_examples"]:
            rank_zero_warn(f"{stage}: no examples were evaluated; nothing written")
            return
        for name, value in results["metrics"].items():
            if "_client_" not in name or name.endswith("_client_min"):  # the table: overall and worst client
                pl_module.log(f"{stage}/{name}", value)
        if trainer.is_global_zero:
            scalars = {f"{stage}/{k}": v for k, v in results["metrics"].items()}
            scalars.update({f"{stage}_client_{c}/{k}": v for c, m in results["clients"].items() for k, v in m.items()})
            scalars.update({f"{stage}_group_{g}/{k}": v for g, m in results["groups"].items() for k, v in m.items()})
            for logger in trainer.loggers:
                logger.log_metrics(scalars, step=round_number)
            path = write_results(
                results_dir(trainer.ckpt_path, self.report.output_dir(trainer)) / f"{stage}_results.json", results
            )
            rank_zero_info(f"{stage}: {results['num_examples']} examples of {results['dataset']}; results in {path}")

    # ============================================================================ the end
    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pl_module.load_state(self.global_state)
        out = self.report.output_dir(trainer)
        if self.save_adapter and trainer.is_global_zero:
            pl_module.save_adapter(out / "adapter")
            personal = self.store.state_dict()
            if self._initial_personal and personal:
                torch.save({cid: e["personal"] for cid, e in personal.items()}, out / "personal_states.pt")
        data = self.datamodule.data_report() if hasattr(self.datamodule, "data_report") else {}
        self.report.write_summary(trainer, extra={**self.fault_counts(), "hooks": self.hook_summaries(), "data": data})

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # A run that stops (every update rejected, a crash, SIGTERM) still leaves summary.json of
        # what happened: rounds done, rejections, the round it stopped in. Bad input, raised
        # before fit started, writes nothing.
        if not getattr(self, "_fit_started", False):
            return
        stopped = {
            "error": " ".join(f"{type(exception).__name__}: {exception}".split()),
            "round": trainer.current_epoch + 1,
            "failed": list(self._round_failed),
            "rejected": dict(self._round_rejected),
        }
        self.report.write_summary(
            trainer, extra={**self.fault_counts(), "hooks": self.hook_summaries(), "stopped": stopped}
        )

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        unguard_training_step(self, pl_module)

    # ============================================================================= resume
    @override
    def state_dict(self) -> dict[str, Any]:
        return {**self.fault_counts(), "seed": self.seed}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.failed_clients = state_dict.get("failed_clients", 0)
        self.rejected_updates = state_dict.get("rejected_updates", 0)
        self.clipped_updates = state_dict.get("clipped_updates", 0)
        self._seed = state_dict.get("seed", self._seed)

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        checkpoint["federation"] = {
            "global_state": self.global_state,
            "clients": self.store.state_dict(),
            "strategy": self.strategy.state_dict(),
            "hooks": [h.state_dict() for h in self.hooks],
            "report": self.report.state_dict(),
        }

    @override
    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        fed = checkpoint.get("federation")
        if fed is None:
            rank_zero_warn("checkpoint has no federation state; starting the federation afresh")
            return
        self.global_state = clone_state(fed["global_state"])
        self.store.load_state_dict(fed.get("clients", {}))
        self.strategy.load_state_dict(fed.get("strategy", {}))
        for hook, state in zip(self.hooks, fed.get("hooks", [])):
            hook.load_state_dict(state)
        self.report.load_state_dict(fed.get("report", {}))
        self._plans = {}
