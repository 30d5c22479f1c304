"""One client's turn in one round, as an object both transports drive.

A :class:`ClientTurn` owns everything a client's local training keeps between its first
and its last batch: the state it received, its algorithm memory and the strategy's
:class:`~lightning_fed.strategies.LocalCorrection`, the optimizer steps and losses so far,
and whether it failed. :meth:`ClientTurn.begin` loads the start state (plus the client's
personal state), clears the optimizer state and seeds local randomness by
``(seed, round, client)``; :meth:`ClientTurn.end` returns the
:class:`~lightning_fed.strategies.ClientUpdate` the client uploads. The in-process
:class:`~lightning_fed.callbacks.FederatedLoop` runs one turn after another inside a round;
the Flower client (:class:`~lightning_fed.deploy.ClientLoop`) runs a single one. Both go
through this code, which is why a deployment and a simulation of a config reach the same state.

:class:`TurnPlan` is the layout of a turn (client, number of batches) that the round's
batch sampler reads, and :func:`turn_batches` how many batches a turn takes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from lightning_fed.compression.uplink import compress_client_update
from lightning_fed.federation.report import bucket_count
from lightning_fed.federation.sampling import derive_seed
from lightning_fed.federation.store import state_layout
from lightning_fed.state import StateDict, clone_state, state_nbytes
from lightning_fed.strategies.base import ClientUpdate, LocalCorrection, Strategy
from lightning_fed.strategies.lora_factors import match_rank

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.compression import UpdateCompressor
    from lightning_fed.federation.hooks import RoundHook
    from lightning_fed.federation.store import ClientStateStore


@dataclass(frozen=True)
class TurnPlan:
    """One client's share of a round's batches: which client, and how many batches it trains on."""

    client_id: int
    num_batches: int


def turn_batches(
    local_steps: int | None, local_epochs: int | None, num_examples: int, batch_size: int, accumulate: int
) -> int:
    """Batches of one turn: ``local_steps`` optimizer steps, or ``local_epochs`` passes over
    ``num_examples`` rounded up to whole windows of ``accumulate`` batches (a window never
    spans two clients, or their gradients would be summed)."""
    if local_steps is not None:
        return local_steps * accumulate
    return accumulate * math.ceil(local_epochs * math.ceil(num_examples / batch_size) / accumulate)


class ClientTurn:
    """The local training of one client in one round.

    Args:
        client_id: The client.
        round_idx: The round (0-based).
        rounds: Number of rounds of the run (for round schedules in hooks).
        seed: The run's federation seed; local randomness is seeded by ``(seed, round, client)``.
        strategy: The run's strategy (its client side: ``local_correction``).
        store: Where the client keeps its personal state and memory between rounds.
        num_examples: ``|D_k|`` as the update reports it (its FedAvg weight).
        hooks: The run's round hooks (``on_client_start`` / ``on_client_end`` run here).
        initial_personal: Personal parameters of a client that has none yet.
        compressor: Compress the upload (``federation.compression``; see
            :mod:`lightning_fed.compression.uplink`); ``None``: full precision.
        private: The run is differentially private
            (:func:`~lightning_fed.privacy.run.privacy_enabled`): ``num_examples`` is reported
            rounded down to a power of two (:func:`~lightning_fed.federation.report.bucket_count`)
            and the mean training loss is not sent (``ClientUpdate.metrics`` holds no
            ``train_loss``): neither the exact count nor a raw loss leaves the client.

    Attributes (read by hooks, the progress bar and the failure guard):
        steps: Optimizer steps taken so far. losses: training losses so far.
        failed: Whether a local step raised (the turn then uploads nothing).
        received: The shared state the client started from. update: what :meth:`end` returned.
        down_bytes / up_bytes: What the client received / uploads.
    """

    def __init__(
        self,
        client_id: int,
        round_idx: int,
        rounds: int,
        seed: int,
        strategy: Strategy,
        store: ClientStateStore,
        num_examples: int,
        hooks: Sequence[RoundHook] = (),
        initial_personal: StateDict | None = None,
        compressor: UpdateCompressor | None = None,
        private: bool = False,
    ) -> None:
        self.client_id, self.round_idx, self.rounds, self.seed = client_id, round_idx, rounds, seed
        self.strategy, self.store = strategy, store
        self.private = private
        self.num_examples = bucket_count(num_examples) if private and num_examples >= 1 else num_examples
        self.hooks = list(hooks)
        self.compressor = compressor
        self.initial_personal: StateDict = initial_personal or {}
        self.received: StateDict = {}
        self.downlink: StateDict = {}
        self.memory: StateDict = {}
        self.correction: LocalCorrection | None = None
        self.steps = 0
        self.losses: list[float] = []
        self.failed = False
        self.update: ClientUpdate | None = None
        self.down_bytes = self.up_bytes = 0
        self._live: StateDict = {}  # the module's shared parameters (live tensors) during the turn
        self._step_lr: float | None = None

    def begin(self, trainer: pl.Trainer, module: pl.LightningModule, start: StateDict, downlink: StateDict) -> None:
        """Load the start state the server sent and the client's own state, then run the hooks."""
        entry = self.store.get(self.client_id, state_layout(module.personal_parameters(), start))
        module.load_state(match_rank(start, module.shared_parameters()))  # a lower-rank LoRA: zero-padded
        module.load_state(entry["personal"] or self.initial_personal)
        for opt in trainer.optimizers:  # optimizer state never leaks between clients
            opt.state.clear()
        torch.manual_seed(derive_seed(self.seed, self.round_idx, self.client_id))
        self.memory = entry["memory"]
        self.correction = self.strategy.local_correction(start, downlink, self.memory)
        self.received, self.downlink = start, downlink
        self._live = module.shared_parameters()
        self.down_bytes = state_nbytes(start) + state_nbytes(downlink)
        for hook in self.hooks:
            hook.on_client_start(self, trainer, module, self.client_id)

    def train_on(self, parameters: StateDict) -> None:
        """The tensors that hold this client's shared parameters while it trains (its correction and
        its upload read them): the module's own from :meth:`begin`; a group of clients trained
        together gives each turn the views of its slot of the stacked adapters
        (:mod:`~lightning_fed.batching.batched_turns`)."""
        self._live = parameters

    @property
    def active(self) -> bool:
        """Begun, not ended, not failed: local steps count and are corrected."""
        return self.correction is not None and self.update is None and not self.failed

    # -------------------------------------------------------------------- local steps
    def before_optimizer_step(self, lr: float) -> None:
        """The strategy's gradient correction (e.g. SCAFFOLD's ``c - c_i``) before a step at ``lr``."""
        if not self.active:
            return
        self.correction.correct_gradients(self._live)
        self.steps += 1
        self._step_lr = lr

    def after_optimizer_step(self) -> None:
        """A correction of the weights after an optimizer step (SCAFFOLD ``parameter`` mode)."""
        lr, self._step_lr = self._step_lr, None
        if lr is not None and self.active:
            self.correction.after_optimizer_step(self._live, lr)

    def record_loss(self, loss: Any) -> None:
        if loss is not None:
            self.losses.append(float(loss))

    def fail(self) -> None:
        """A local step raised: the turn's remaining batches are skipped and nothing is uploaded."""
        self.failed = True

    # ---------------------------------------------------------------------------- end
    def end(self, trainer: pl.Trainer, module: pl.LightningModule) -> ClientUpdate | None:
        """The update the client uploads (``None`` if the turn failed); stores its own state."""
        if self.failed:
            return None
        # A client returns new values of exactly what it received (all of the global state
        # by default; a clustered strategy may send a client only its cluster's part).
        # (At the rank it received: a lower-rank client's padding is cut off again.)
        shared = clone_state(match_rank({k: self._live[k] for k in self.received}, self.received))
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else 0.0
        extras = self.correction.finish(shared, self.steps, lr) if self.steps else {}
        # A private client keeps its loss: an unbounded function of its data, in no guarantee.
        metrics = {"train_loss": sum(self.losses) / len(self.losses)} if self.losses and not self.private else {}
        update = ClientUpdate(self.client_id, self.num_examples, shared, extras, metrics)
        if self.compressor is not None:  # the payload is what travels; residuals stay in memory
            update, self.memory = compress_client_update(update, self.received, self.compressor, self.memory)
        self.store.put(self.client_id, module.personal_parameters(), self.memory)
        self.up_bytes = state_nbytes(update.state) + state_nbytes(update.extras)
        for hook in self.hooks:
            hook.on_client_end(self, trainer, module, update)
        self.update, self._live = update, {}
        return update
