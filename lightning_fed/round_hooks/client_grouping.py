"""FedBiscuit's client grouping step (Wu et al., 2024, arXiv:2407.03038, Sec. 3.2, Step 2.1).

Every ``tau`` rounds after the warm-up, all U selectors are broadcast to every client; each
client reports the mean selector loss of each on its local validation split; the server
assigns clients to selectors with
:func:`~lightning_fed.strategies.fedbiscuit.balanced_assignment`. The hook also tells the
strategy which round it is and activates each client's selector for its local training.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from lightning_fed.federation.hooks import RoundHook
from lightning_fed.state import state_nbytes
from lightning_fed.strategies.fedbiscuit import FedBiscuit, balanced_assignment

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.callbacks.federated_loop import FederatedLoop


@torch.no_grad()
def selector_losses(module: Any, datamodule: Any, num_selectors: int, metric: str = "loss") -> Tensor:
    """``(M, U)``: mean ``metric`` (the loss by default) of every selector on every client's validation split."""
    was_training = module.training
    module.eval()
    out = torch.zeros(datamodule.num_clients, num_selectors)
    try:
        for u in range(num_selectors):
            module.use_selector(u)
            for c in range(datamodule.num_clients):
                total, count = 0.0, 0
                for batch in datamodule.client(c).val_dataloader():
                    batch = {k: v.to(module.device) for k, v in batch.items()}
                    loss = module.pair_metrics(batch)[metric]
                    total, count = total + float(loss.sum()), count + loss.numel()
                out[c, u] = total / max(count, 1)
    finally:
        module.train(was_training)
    return out


class ClientGrouping(RoundHook):
    """Drives a :class:`~lightning_fed.strategies.FedBiscuit` run: schedule, grouping, selectors.

    Each grouping is recorded (round, assignment, loss matrix, broadcast bytes) in
    ``summary.json`` under ``hooks.ClientGrouping.groupings`` and as a TensorBoard image
    (clients x selectors) when the logger is TensorBoard's.
    """

    def __init__(self) -> None:
        self.groupings: list[dict[str, Any]] = []
        self._pending_bytes = 0

    def _strategy(self, loop: FederatedLoop) -> FedBiscuit:
        if not isinstance(loop.strategy, FedBiscuit):
            raise TypeError(f"ClientGrouping needs federation.strategy=FedBiscuit, got {type(loop.strategy).__name__}")
        return loop.strategy

    def on_round_start(
        self, loop: FederatedLoop, trainer: pl.Trainer, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> None:
        strategy = self._strategy(loop)
        strategy.client_sizes = list(loop.datamodule.client_sizes)
        strategy.start_round(round_idx)
        if strategy.is_grouping_round(round_idx):
            module.load_state(loop.global_state)
            losses = selector_losses(module, loop.datamodule, strategy.num_selectors)
            strategy.set_assignment(balanced_assignment(losses))
            # Every selector goes to every client (Step 2.1); counted in this round's downlink.
            self._pending_bytes = loop.datamodule.num_clients * state_nbytes(loop.global_state)
            loop.add_round_bytes(down=self._pending_bytes)
            self.groupings.append(
                {
                    "round": round_idx + 1,
                    "assignment": list(strategy.assignment),
                    "losses": losses.tolist(),
                    "broadcast_bytes": self._pending_bytes,
                }
            )
            self._log_image(trainer, strategy, round_idx)
        module.client_selectors = {c: strategy.selector_of(c) for c in range(loop.datamodule.num_clients)}

    def summary(self) -> dict[str, Any]:
        return {"groupings": self.groupings}

    def on_client_start(
        self, loop: FederatedLoop, trainer: pl.Trainer, module: pl.LightningModule, client_id: int
    ) -> None:
        module.use_selector(self._strategy(loop).selector_of(client_id))

    def after_aggregate(
        self, loop: FederatedLoop, trainer: pl.Trainer, module: pl.LightningModule, round_idx: int
    ) -> None:
        self._pending_bytes = 0

    @staticmethod
    def _log_image(trainer: pl.Trainer, strategy: FedBiscuit, round_idx: int) -> None:
        logger = trainer.logger
        if isinstance(logger, TensorBoardLogger):
            onehot = torch.zeros(1, strategy.num_clients, strategy.num_selectors)
            onehot[0, torch.arange(strategy.num_clients), torch.tensor(strategy.assignment)] = 1.0
            logger.experiment.add_image("fedbiscuit/assignment", onehot, global_step=round_idx + 1, dataformats="CHW")

    def state_dict(self) -> dict[str, Any]:
        return {"groupings": self.groupings, "pending_bytes": self._pending_bytes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.groupings = list(state.get("groupings", []))
        self._pending_bytes = state.get("pending_bytes", 0)
