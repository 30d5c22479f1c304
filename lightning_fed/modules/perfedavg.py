"""Per-FedAvg (Fallah et al., 2020, "Personalized Federated Learning with Theoretical
Guarantees: A Model-Agnostic Meta-Learning Approach", NeurIPS, arXiv:2002.07948), first-order
version (Per-FedAvg (FO)), with the DPO objective on LoRA.

Each local step: ``theta' = theta - alpha * grad f(theta; D)`` (inner steps on one batch
``D``), then ``theta <- theta - beta * grad f(theta'; D')`` on an independent batch ``D'``
(the first-order meta-gradient drops the Hessian term). The personalised model of a client
is the meta-model after ``eval_adapt_steps`` inner steps on its own data
(:meth:`PerFedAvgModule.personalize`, run by
:class:`~lightning_fed.evaluation.PersonalizedEvaluation`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fed.modules.dpo import DPOModule
from lightning_fed.option_rules import PERFEDAVG_OWN, check


def split_pairs(batch: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The first and second half of a batch of pairs, as two batches ``D`` and ``D'``."""
    n = batch["chosen_input_ids"].shape[0]
    if n < 2:
        raise ValueError(f"data.batch_size must be >= 2 for Per-FedAvg (D and D' halves), got a batch of {n}")
    half = n // 2
    first = {k: v[:half] if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == n else v for k, v in batch.items()}
    second = {k: v[half:] if torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == n else v for k, v in batch.items()}
    return first, second


class PerFedAvgModule(DPOModule):
    """First-order MAML local steps; ``lr`` is the outer (meta) learning rate ``beta``.

    Each local batch is split in two halves: the inner steps run on the first (``D``), the
    outer gradient is taken on the second (``D'``), so the two are disjoint draws from the
    client's data as in Algorithm 1 (double ``data.batch_size`` to keep ``|D|``).

    Args:
        inner_lr: ``alpha``, the inner (adaptation) learning rate (0.01 in FedPDPO App. D.3).
        inner_steps: Inner SGD steps on ``D`` per local step (5 in FedPDPO App. D.3).
        eval_adapt_steps: Inner steps on the client's own data before it is evaluated.
        gradient_clip_val: Max norm of the outer gradient (``None``: no clipping).
        **kwargs: See :class:`~lightning_fed.modules.DPOModule` (``lr`` is ``beta``).
    """

    batchable = False  # its training_step steps its optimizers itself (docs/developer/batching.md)

    def __init__(
        self,
        *args: Any,
        inner_lr: float = 0.01,
        inner_steps: int = 1,
        eval_adapt_steps: int = 1,
        gradient_clip_val: float | None = None,
        **kwargs: Any,
    ) -> None:
        check(
            PERFEDAVG_OWN,
            inner_lr=inner_lr,
            inner_steps=inner_steps,
            eval_adapt_steps=eval_adapt_steps,
            gradient_clip_val=gradient_clip_val,
        )
        super().__init__(*args, **kwargs)
        self.automatic_optimization = False
        self.inner_lr, self.inner_steps, self.eval_adapt_steps = inner_lr, inner_steps, eval_adapt_steps
        self.gradient_clip_val = gradient_clip_val

    def inner_step(self, batch: dict[str, Tensor]) -> Tensor:
        """``theta <- theta - alpha * grad f(theta; batch)`` in place, by plain SGD; returns the loss."""
        params = [p for p in self.shared_parameters().values() if p.requires_grad]
        loss = self.pair_metrics(batch)["loss"].mean()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(g, alpha=self.inner_lr)
        return loss.detach()

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        optimizer = self.optimizers()
        inner, outer = split_pairs(batch)
        params = self.shared_parameters()
        theta = {n: p.detach().clone() for n, p in params.items()}
        for _ in range(self.inner_steps):
            self.inner_step(inner)
        metrics = self.pair_metrics(outer)
        loss = metrics["loss"].mean()
        optimizer.zero_grad()
        self.manual_backward(loss)  # first-order meta-gradient: grad f(theta'; D')
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(theta[name])  # back to theta; the step applies the gradient taken at theta'
        if self.gradient_clip_val is not None:
            self.clip_gradients(optimizer, gradient_clip_val=self.gradient_clip_val, gradient_clip_algorithm="norm")
        optimizer.step()
        optimizer.zero_grad()
        bs = metrics["loss"].shape[0]
        for name, value in metrics.items():
            self.log(f"train/{name}", value.float().mean(), prog_bar=name in ("loss", "pref_acc"), batch_size=bs)
        return loss.detach()

    def personalize(self, client: Any, seed: int) -> None:
        """Adapt the loaded meta-model to ``client`` (a :class:`ClientData`): ``eval_adapt_steps``
        inner steps on one batch of its training data, drawn with ``seed``."""
        if self.eval_adapt_steps == 0 or len(client.train_set) == 0:
            return
        g = torch.Generator().manual_seed(seed)
        order = torch.randperm(len(client.train_set), generator=g)[: client.batch_size].tolist()
        batch = client.collate([client.train_set[i] for i in order])
        batch = {k: v.to(self.device) if torch.is_tensor(v) else v for k, v in batch.items()}
        for _ in range(self.eval_adapt_steps):
            self.inner_step(batch)
