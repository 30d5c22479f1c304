"""FedPDPO's local objective (Zhu et al., 2026, "FedPDPO: Federated Personalized Direct
Preference Optimization for Large Language Model Alignment", arXiv:2603.19741).

Frozen backbone + shared LoRA (``W_0 || (A_i, B_i)``), a personal bottleneck adapter
``M_i``, a personal LM head ``h_1`` and a personal explicit reward head ``h_2`` (Eq. 2).
The loss is DPO's logistic loss on the combined margin
``Delta = Delta_ir + w_r * s * Delta_er`` (Eqs. 4-8), optimised alternately (Algorithm 1):
first the personal modules with LoRA frozen (``lr_h``), then LoRA with the personal modules
frozen (``lr_w``). Only LoRA is uploaded; FedAvg weights it by ``|D_i|``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from lightning_fed.modules.losses import IGNORE_INDEX, preference_metrics
from lightning_fed.modules.pdpo_loss import (
    AdaptiveRewardScale,
    combined_margin,
    exclusion_mask,
    implicit_margin,
    pdpo_loss,
    reward_weight,
)
from lightning_fed.modules.pdpo_schedule import LossTriggeredDecay
from lightning_fed.modules.personal_head import PersonalHeadDPO, build_optimizer, frozen
from lightning_fed.modules.preference import concatenated_inputs
from lightning_fed.modules.reward_head import POOLS, RewardHead

LOCAL_SCHEDULES = ("alternate", "phased")


class PDPOModule(PersonalHeadDPO):
    """Personalized DPO with dual personal heads and a bottleneck adapter.

    Local schedule (``local_schedule``):

    * ``alternate`` (the default): on every batch (Algorithm 1, one step of each phase per
      batch, so one local epoch trains the personal modules for one epoch and LoRA for one
      epoch, App. D.3's intra-domain 1:1): (1) a step of the personal modules with ``lr_h``
      while LoRA is frozen, which also folds the batch into the EMA ``s``; (2) a step of LoRA
      with ``lr_w`` while the personal modules are frozen, through the updated personal
      modules (the backbone's output ``z'`` is the personal step's: see
      ``reuse_backbone_forward``).
    * ``phased``: Algorithm 1's two phases as whole blocks of the client's turn: the first
      ``personal_epochs / (personal_epochs + lora_epochs)`` of the turn's batches train only the
      personal modules, the rest only LoRA. App. D.3's cross-domain setting (3 epochs of LoRA,
      1 of the personal modules) is ``personal_epochs=1, lora_epochs=3`` with
      ``federation.local_epochs=4``.

    Gradient accumulation (``accumulate_grad_batches``, App. D.3: batch 8 x 2): this module
    optimises manually (two optimizers), for which Lightning forbids
    ``Trainer(accumulate_grad_batches)``; the module accumulates itself. Each optimizer steps
    once per window of that many batches (and on the last batch of the client's turn, so a
    window never spans two clients), on the mean loss of the window; the
    :class:`~lightning_fed.callbacks.FederatedLoop` reads the same attribute to lay out
    ``local_steps * accumulate_grad_batches`` batches. Under ``alternate`` the LoRA gradients
    of a window are taken before the window's personal step (the exact per-batch order of
    Algorithm 1 holds only without accumulation); under ``phased`` the phases stay exact.

    Sample exclusion (``exclusion_k``, App. D.3's "k=2, maximum exclusion ratio 0.5"): pairs
    whose loss is more than ``k`` standard deviations above the batch mean are left out of the
    training step, at most ``exclusion_max_ratio`` of the batch (see
    :func:`~lightning_fed.modules.pdpo_loss.exclusion_mask`). Validation never excludes.

    Validation reports, per pair, ``loss`` (Eq. 8), ``margin`` (``beta * Delta``),
    ``reward_margin``/``reward_acc`` (implicit, ``beta * Delta_ir``), ``explicit_acc``
    (``Delta_er > 0``) and ``pref_acc``: ``log p(y_w|x) > log p(y_l|x)`` under the client's
    personal head and bottleneck (the paper's metric).

    Args:
        lr_h: Learning rate of the personal modules (default: ``lr``; 1e-4 in the paper).
        lr_w: Learning rate of LoRA (default: ``lr``; 5e-5 in the paper).
        use_bottleneck: Ablation (A1) when false: the heads read ``z'`` directly.
        use_reward_head: Ablation (A2) when false: ``Delta = Delta_ir``, i.e. DPO through the
            personal head (FedAvg+DPO with personal heads).
        bottleneck_dim: Bottleneck width (256).
        bottleneck_dropout: Bottleneck dropout (0.1).
        reward_hidden: Reward-head MLP width (256).
        reward_dropout: Reward-head dropout (0.1).
        reward_pool: Mean-pool the reward head over the whole ``sequence`` (the paper) or
            the ``response`` tokens only.
        reward_weight_start: ``w_r`` in the first round (0.5).
        reward_weight_end: ``w_r`` in the last round (1.5).
        scale_momentum: EMA momentum of ``s`` (0.95).
        scale_eps: ``eps`` of Eq. (7).
        rounds: Rounds of the ``w_r`` schedule; default: ``federation.rounds`` of the run.
        lr_decay: App. D.3's decay factor (0.8 in the paper): a client's ``lr_h`` and ``lr_w``
            are multiplied by it when its mean local loss rose from one of its rounds to the
            next (:class:`~lightning_fed.modules.pdpo_schedule.LossTriggeredDecay`, personal
            state). ``None`` (default) keeps the learning rates constant.
        min_lr: Floor of the decayed learning rates (1e-6 in the paper).
        local_schedule: ``alternate`` (per batch, the default) or ``phased`` (whole blocks).
        personal_epochs: Share of the turn for the personal modules under ``phased`` (1).
        lora_epochs: Share of the turn for LoRA under ``phased`` (1 intra-domain, 3 cross-domain).
        accumulate_grad_batches: Batches per optimizer step (2 in App. D.3; 1 = none).
        exclusion_k: Sample-exclusion threshold in standard deviations (2 in the paper);
            ``None`` (default) excludes nothing: the paper states only the two numbers, so
            the rule (a k-sigma cut on the batch's losses) is this package's reading.
        exclusion_max_ratio: Most of a batch that may be excluded (0.5 in the paper).
        reuse_backbone_forward: Under ``alternate``, run the backbone once per batch for both
            steps (the default): LoRA is frozen during the personal step, so the LoRA step's
            ``z'`` equals the personal step's, and only the personal modules and heads run twice.
            The gradients are those of the recomputing path (``false``, kept for comparison);
            with dropout active in the backbone (``disable_dropout=false``) both steps then see
            one dropout mask instead of two.
        **kwargs: See :class:`PersonalHeadDPO` (``gradient_clip_val``) and
            :class:`~lightning_fed.modules.DPOModule` (``backbone``, ``lora``, ``beta``...).
    """

    batchable = False  # its training_step steps its optimizers itself (docs/developer/batching.md)

    personal_modules = ("lm_head", "bottleneck", "reward_head", "reward_scale", "lr_decay")

    def __init__(
        self,
        *args: Any,
        lr_h: float | None = None,
        lr_w: float | None = None,
        use_bottleneck: bool = True,
        use_reward_head: bool = True,
        bottleneck_dim: int = 256,
        bottleneck_dropout: float = 0.1,
        reward_hidden: int = 256,
        reward_dropout: float = 0.1,
        reward_pool: str = "sequence",
        reward_weight_start: float = 0.5,
        reward_weight_end: float = 1.5,
        scale_momentum: float = 0.95,
        scale_eps: float = 1e-8,
        rounds: int | None = None,
        lr_decay: float | None = None,
        min_lr: float = 1e-6,
        local_schedule: str = "alternate",
        personal_epochs: int = 1,
        lora_epochs: int = 1,
        accumulate_grad_batches: int = 1,
        exclusion_k: float | None = None,
        exclusion_max_ratio: float = 0.5,
        reuse_backbone_forward: bool = True,
        **kwargs: Any,
    ) -> None:
        problems = []
        if local_schedule not in LOCAL_SCHEDULES:
            problems.append(f"model.local_schedule must be one of {LOCAL_SCHEDULES}, got {local_schedule!r}")
        for name, value in (
            ("personal_epochs", personal_epochs),
            ("lora_epochs", lora_epochs),
            ("accumulate_grad_batches", accumulate_grad_batches),
        ):
            if not isinstance(value, int) or value < 1:
                problems.append(f"model.{name} must be an integer >= 1, got {value!r}")
        if exclusion_k is not None and not exclusion_k >= 0:
            problems.append(f"model.exclusion_k must be >= 0 or null, got {exclusion_k}")
        if not 0 <= exclusion_max_ratio < 1:
            problems.append(f"model.exclusion_max_ratio must be in [0, 1), got {exclusion_max_ratio}")
        for name, value in (("lr_h", lr_h), ("lr_w", lr_w)):
            if value is not None and not value > 0:
                problems.append(f"model.{name} must be > 0, got {value}")
        if reward_pool not in POOLS:
            problems.append(f"model.reward_pool must be one of {POOLS}, got {reward_pool!r}")
        if min(reward_weight_start, reward_weight_end) < 0:
            problems.append(
                f"model.reward_weight_start/end must be >= 0, got {reward_weight_start}, {reward_weight_end}"
            )
        if rounds is not None and rounds < 1:
            problems.append(f"model.rounds must be >= 1, got {rounds}")
        if lr_decay is not None and not 0 < lr_decay < 1:
            problems.append(f"model.lr_decay must be in (0, 1) or null, got {lr_decay}")
        if not min_lr >= 0:
            problems.append(f"model.min_lr must be >= 0, got {min_lr}")
        if problems:
            raise ValueError("; ".join(problems))
        super().__init__(
            *args,
            use_bottleneck=use_bottleneck,
            bottleneck_dim=bottleneck_dim,
            bottleneck_dropout=bottleneck_dropout,
            **kwargs,
        )
        self.automatic_optimization = False
        self.lr_h, self.lr_w = lr_h or self.hparams.lr, lr_w or self.hparams.lr
        self.use_reward_head, self.reward_pool, self.rounds = use_reward_head, reward_pool, rounds
        self.reward_weight_range = (float(reward_weight_start), float(reward_weight_end))
        self.reward_head = (
            RewardHead(self.hidden_dim, reward_hidden, reward_dropout).to(self.personal_dtype)
            if use_reward_head
            else None
        )
        self.reward_scale = AdaptiveRewardScale(scale_momentum, scale_eps) if use_reward_head else None
        self.lr_decay = LossTriggeredDecay(lr_decay, min_lr) if lr_decay is not None else None
        self.local_schedule, self.personal_epochs, self.lora_epochs = local_schedule, personal_epochs, lora_epochs
        self.accumulate_grad_batches = accumulate_grad_batches
        self.exclusion_k, self.exclusion_max_ratio = exclusion_k, exclusion_max_ratio
        self.reuse_backbone_forward = bool(reuse_backbone_forward)

    @property
    def sets_lr(self) -> bool:
        """Whether each step sets the optimizers' rates (App. D.3's decay, from ``lr_h``/``lr_w``):
        a checkpoint's param-group ``lr`` is then the last rate set (see
        :mod:`~lightning_fed.federation.optimizer_check`)."""
        return self.lr_decay is not None

    # -------------------------------------------------------------------------- schedule
    def _federated_loop(self) -> Any:
        from lightning_fed.federation.driver import find_driver

        return find_driver(self._trainer)

    def total_rounds(self) -> int | None:
        """``model.rounds``, else the ``federation.rounds`` of the FederatedLoop on the trainer."""
        if self.rounds is not None:
            return self.rounds
        loop = self._federated_loop()
        return loop.run.rounds if loop is not None else None

    def turn_position(self, batch_idx: int) -> tuple[int, int]:
        """(position in the client's turn, turn length) from the FederatedLoop; outside a
        federation the whole epoch is one turn."""
        loop = self._federated_loop()
        if loop is not None:
            return loop.turn_progress(batch_idx)
        return batch_idx, int(self._trainer.num_training_batches)

    def local_phases(self, position: int, length: int) -> tuple[bool, bool]:
        """(train the personal modules, train LoRA) on the batch at ``position`` of a turn of
        ``length`` batches. ``phased`` splits the turn's accumulation windows in the ratio
        ``personal_epochs : lora_epochs`` (rounded; each phase gets at least one window when
        there are two)."""
        if self.local_schedule == "alternate":
            return True, True
        windows = math.ceil(length / self.accumulate_grad_batches)
        personal = round(windows * self.personal_epochs / (self.personal_epochs + self.lora_epochs))
        if windows >= 2:
            personal = min(max(personal, 1), windows - 1)
        first = position // self.accumulate_grad_batches < personal
        return first, not first

    def objective(self, losses: Tensor) -> Tensor:
        """The batch objective: the mean loss over the pairs kept by sample exclusion."""
        if self.exclusion_k is None:
            return losses.mean()
        keep = exclusion_mask(losses, self.exclusion_k, self.exclusion_max_ratio)
        self.log("train/excluded", 1.0 - keep.float().mean(), batch_size=losses.shape[0])
        return losses[keep].mean()

    def accumulate(self, optimizer: Any, loss: Tensor, window: int, step: bool) -> None:
        """Backward ``loss / window`` into the gradients; on ``step``: clip, step, zero."""
        self.manual_backward(loss / window)
        if step:
            if self.gradient_clip_val is not None:
                self.clip_gradients(optimizer, gradient_clip_val=self.gradient_clip_val, gradient_clip_algorithm="norm")
            optimizer.step()
            optimizer.zero_grad()

    def current_reward_weight(self) -> float:
        """``w_r`` of the current round; the current round is ``trainer.current_epoch``, which
        the checkpoint restores, so a resumed run continues the schedule where it stopped."""
        rounds = self.total_rounds()
        if rounds is None:
            return self.reward_weight_range[0]
        round_idx = self._trainer.current_epoch if self._trainer is not None else 0
        return reward_weight(round_idx, rounds, *self.reward_weight_range)

    # --------------------------------------------------------------------------- metrics
    def pdpo_metrics(
        self,
        batch: dict[str, Tensor],
        reference: tuple[Tensor, Tensor] | None = None,
        update_scale: bool = False,
        backbone: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """Per-pair loss (Eq. 8) and diagnostics; ``update_scale`` folds the batch into ``s``;
        ``backbone`` is the batch's ``z'`` when already computed (see :meth:`training_step`)."""
        logps, z, inputs = self.policy_forward(batch, backbone)
        chosen, rejected = logps.chunk(2)
        ref_chosen, ref_rejected = reference if reference is not None else self.reference_log_probs(batch)
        delta_ir = implicit_margin(chosen, rejected, ref_chosen, ref_rejected)  # Eq. (4)
        extra = {}
        if self.reward_head is not None:
            pool = (
                inputs["attention_mask"].bool() if self.reward_pool == "sequence" else inputs["labels"] != IGNORE_INDEX
            )
            r_chosen, r_rejected = self.reward_head(z, pool).chunk(2)  # Eq. (3)
            delta_er = r_chosen - r_rejected  # Eq. (5)
            scale = self.reward_scale.update(delta_ir, delta_er) if update_scale else self.reward_scale.value.detach()
            delta = combined_margin(delta_ir, delta_er, self.current_reward_weight(), scale)  # Eq. (6)
            extra["explicit_acc"] = (delta_er.detach() > 0).float()
        else:
            delta = delta_ir  # ablation (A2): plain DPO through the personal head
        # The logged rewards are the implicit ones, beta * log pi/ref of each response (Eq. (4)'s terms).
        metrics = preference_metrics(
            pdpo_loss(delta, self.beta),  # Eq. (8)
            self.beta * (chosen - ref_chosen).detach(),
            self.beta * (rejected - ref_rejected).detach(),
            chosen,
            rejected,
        )
        metrics.update(extra, margin=self.beta * delta.detach())
        return metrics

    # -------------------------------------------------------------------------- training
    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        hp = self.hparams
        opt_h = build_optimizer(hp.optimizer, self.trainable_personal(), self.lr_h, hp.weight_decay)
        opt_w = build_optimizer(hp.optimizer, self.trainable_shared(), self.lr_w, hp.weight_decay)
        return [opt_h, opt_w]

    def apply_lr_decay(self, opt_h: Any, opt_w: Any) -> None:
        """Set this client's decayed ``lr_h``/``lr_w`` (App. D.3) on the two optimizers."""
        round_idx = self._trainer.current_epoch if self._trainer is not None else 0
        self.lr_decay.start_step(round_idx)
        for opt, base in ((opt_h, self.lr_h), (opt_w, self.lr_w)):
            for group in opt.param_groups:
                group["lr"] = self.lr_decay.lr(base)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        opt_h, opt_w = self.optimizers()
        position, length = self.turn_position(batch_idx)
        a = self.accumulate_grad_batches
        if position == 0:  # a client's turn starts with no gradient (a failed turn may leave some)
            opt_h.zero_grad()
            opt_w.zero_grad()
        window = min(a, length - (position // a) * a)  # the last window of a turn may be shorter
        step = (position + 1) % a == 0 or position == length - 1
        train_h, train_w = self.local_phases(position, length)
        if self.lr_decay is not None:
            self.apply_lr_decay(opt_h, opt_w)
        reference = self.reference_log_probs(batch)  # the same for both phases
        backbone = None
        if train_h and train_w and self.reuse_backbone_forward:
            # LoRA is frozen in the personal step and only the personal modules change before the
            # LoRA step, so both steps read the same z': one backbone forward, its graph (to LoRA)
            # kept for the LoRA step, its values detached for the personal step (issue 23).
            inputs = concatenated_inputs(batch)
            backbone = self.backbone_features(inputs["input_ids"], inputs["attention_mask"])
        observed = False
        if train_h:
            with frozen(self.shared_parameters().values()):  # Algorithm 1, lines 12-15
                z = backbone.detach() if backbone is not None else None
                metrics = self.pdpo_metrics(batch, reference, update_scale=True, backbone=z)
                self.accumulate(opt_h, self.objective(metrics["loss"]), window, step)
        if self.lr_decay is not None and train_h:  # the round's DPO loss, before this step's updates
            self.lr_decay.observe(metrics["loss"].mean().item())
            observed = True
        if train_w:
            with frozen(self.personal_parameters().values()):  # Algorithm 1, lines 16-17
                metrics = self.pdpo_metrics(batch, reference, backbone=backbone)
                self.accumulate(opt_w, self.objective(metrics["loss"]), window, step)
            if self.lr_decay is not None and not observed:
                self.lr_decay.observe(metrics["loss"].mean().item())
        self.log_metrics({k: v.detach() for k, v in metrics.items()})
        if self.reward_scale is not None:
            self.log("train/reward_scale", self.reward_scale.value.detach(), batch_size=metrics["loss"].shape[0])
            self.log("train/reward_weight", self.current_reward_weight(), batch_size=metrics["loss"].shape[0])
        return metrics["loss"].mean().detach()

    @torch.no_grad()
    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        return self.pdpo_metrics(batch)
