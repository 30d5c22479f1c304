"""FedRep (Collins et al., 2021, "Exploiting Shared Representations for Personalized
Federated Learning", ICML, arXiv:2102.07078) with the DPO objective, on LoRA.

The representation (the backbone's shared LoRA) is global; the head (a personal, untied
copy of the backbone's LM head) is local. In each round a client first updates its head
with the representation fixed, then the representation with the head fixed (Algorithm 1),
with separate learning rates (App. D.3 of FedPDPO: head 1e-4, body 5e-5).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fed.batching.client_rows import per_client_loss
from lightning_fed.modules.personal_head import PersonalHeadDPO, build_optimizer, frozen
from lightning_fed.option_rules import FEDREP_OWN, check


class FedRepModule(PersonalHeadDPO):
    """Head steps, then body steps, with Lightning's manual optimisation and two optimizers.

    The first ``head_steps`` local batches of a client's turn update the head only, the
    remaining ones the LoRA body only. A turn is recognised by ``(round, client_id)``:
    the :class:`~lightning_fed.callbacks.FederatedLoop` lays each sampled client's batches
    out contiguously, once per round.

    Args:
        head_steps: Local batches of head updates at the start of each turn (>= 1); keep it
            below ``federation.local_steps`` so that the body trains too.
        lr_head: Learning rate of the head (default: ``lr``).
        lr_body: Learning rate of the LoRA body (default: ``lr``).
        **kwargs: See :class:`~lightning_fed.modules.personal_head.PersonalHeadDPO`.
    """

    batchable = True  # its steps reduce per_client_loss and clip per client (docs/developer/batching.md)
    #: Its manual steps are per client in a group: the loss is per_client_loss, the clip goes through
    #: configure_gradient_clipping, and every client of a group is in the same phase at each batch.
    manual_steps_per_client = True

    def __init__(
        self, *args: Any, head_steps: int = 5, lr_head: float | None = None, lr_body: float | None = None, **kwargs: Any
    ) -> None:
        check(FEDREP_OWN, head_steps=head_steps, lr_head=lr_head, lr_body=lr_body)
        super().__init__(*args, **kwargs)
        self.automatic_optimization = False
        self.head_steps = head_steps
        self.lr_head, self.lr_body = lr_head or self.hparams.lr, lr_body or self.hparams.lr
        self._turn: tuple[int, int] | None = None
        self._turn_batches = 0

    def on_fit_start(self) -> None:
        super().on_fit_start()
        from lightning_fed.federation.driver import find_driver

        loop = find_driver(self.trainer)
        steps = loop.run.local_steps if loop is not None else None
        if steps is not None and steps <= self.head_steps:
            raise ValueError(
                f"model.head_steps={self.head_steps} must be < federation.local_steps={steps}, or the body never trains"
            )

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        hp = self.hparams
        opt_head = build_optimizer(hp.optimizer, self.trainable_personal(), self.lr_head, hp.weight_decay)
        opt_body = build_optimizer(hp.optimizer, self.trainable_shared(), self.lr_body, hp.weight_decay)
        return [opt_head, opt_body]

    def in_head_phase(self, batch: dict[str, Tensor]) -> bool:
        """Advance the turn's batch counter; whether this batch updates the head."""
        turn = (self.current_epoch, int(batch["client_id"][0]))
        if turn != self._turn:
            self._turn, self._turn_batches = turn, 0
        self._turn_batches += 1
        return self._turn_batches <= self.head_steps

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        opt_head, opt_body = self.optimizers()
        if self.in_head_phase(batch):
            optimizer, fixed = opt_head, self.shared_parameters()  # head update, representation fixed
        else:
            optimizer, fixed = opt_body, self.personal_parameters()  # representation update, head fixed
        with frozen(fixed.values()):
            metrics = self.pair_metrics(batch)
            out = per_client_loss(metrics["loss"], batch.get("client_id"))  # one client: the plain mean
            self.manual_step(optimizer, out["loss"])
        self.log_metrics({k: v.detach() for k, v in metrics.items()})
        return {**out, "loss": out["loss"].detach()}
