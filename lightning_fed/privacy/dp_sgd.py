"""Example-level DP-SGD inside a client (Abadi et al., 2016, "Deep Learning with Differential
Privacy", CCS, arXiv:1607.00133, Algorithm 1), on the trainable (LoRA) parameters.

Per optimizer step, for the examples ``i`` of the batch ``L``:

    g_i  = grad of loss_i                          # per-example gradients, Opacus GradSampleModule
    g~_i = g_i * min(1, C / ||g_i||_2)             # clip each example's whole gradient
    g~   = (sum_i g~_i + N(0, z^2 C^2 I)) / |L|    # noise the sum, divide by the lot size

and the local optimizer steps on ``g~``. The per-example gradients come from Opacus'
``GradSampleModule`` hooks (on ``lora_A``/``lora_B``, plain ``nn.Linear`` layers), taken with
``loss_reduction="sum"`` on the mean of the per-example losses and scaled back by ``n``, so
that each row is one example's own gradient. The SFT loss of an example is the mean NLL of
*its* response tokens, not a token mean over the batch (which would make every example's
gradient depend on the others' lengths).
For DPO the example is the *pair*: the chosen and rejected rows of pair ``i`` are summed before
clipping.

FFA-LoRA (Sun et al., 2024, "Improving LoRA in Privacy-preserving Federated Learning",
ICLR, arXiv:2403.12313): ``A`` stays at its (seeded, identical on every client) initialisation,
only ``B`` is trained and exchanged. It halves the noised dimensions and makes the product
``B A`` linear in what is averaged, which is why the paper recommends it under DP.

The noise and the batches must be secret from whoever sees the update: ``seed=None`` (the
default) draws the seed from the operating system (in process the run replaces it by one derived
from its secret, :mod:`~lightning_fed.privacy.secret`); a fixed ``seed`` makes both reproducible
by anyone who knows it (tests only). Each step's noise comes from a generator seeded by
``(seed, round, client, local step)`` (the :class:`~lightning_fed.federation.ClientTurn` in
progress), not from one generator that advances through the run: the noise of a step is the same
whichever process trains the client (in process all clients share the module; under Flower
each node has its own). The seed is never in a checkpoint: an in-process run resumed with its
key file draws the noise of the uninterrupted one.

**Batches.** In a federated run each local step's batch is a Poisson sample of the client's
examples at rate ``B / |D_k|`` (:meth:`ExampleLevelDP.poisson_batch_seed`, laid out by
:class:`~lightning_fed.datamodules.round_sampler.RoundBatchSampler`), the sampling under which
the accountant amplifies by ``B / |D_k|`` (Opacus' ``DPDataLoader``); the noised sum is divided
by the expected batch size ``B``, and an empty batch's step is the noise alone.

The modules :class:`DPSFTModule` and :class:`DPDPOModule` are the package's SFT and DPO
objectives with this step; select them as ``model.class_path`` with ``dp_sgd:`` settings.
Accounting: :func:`example_level_accountant`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from opacus import GradSampleModule
from torch import Tensor

from lightning_fed.datamodules.round_sampler import EMPTY_BATCH
from lightning_fed.dp_sgd_rules import dp_sgd_problems
from lightning_fed.federation.driver import find_driver
from lightning_fed.federation.secret_seed import SecretSeed, as_secret_seed, standard_normal
from lightning_fed.modules.dpo import DPOModule
from lightning_fed.modules.losses import token_log_probs
from lightning_fed.modules.sft import SFTModule
from lightning_fed.privacy.accountant import PrivacyAccountant
from lightning_fed.privacy.clipping import per_example_clip_factors
from lightning_fed.privacy.example_budget import ExampleBudget
from lightning_fed.state import StateDict


@dataclass
class DPSGDSettings:
    """Example-level DP-SGD settings of a client's local training.

    Attributes:
        clip_norm: ``C``, the bound on each example's gradient norm (all trainable tensors together).
        noise_multiplier: ``z``; the noise std on the summed gradient is ``z * C``. Epsilon is
            then only reported.
        target_epsilon: The example-level budget instead of ``noise_multiplier`` (give exactly
            one): each client's ``z`` is calibrated before training for its own sampling rate over
            the planned rounds (:class:`~lightning_fed.privacy.example_budget.ExampleBudget`), at
            the run's ``delta``.
        expected_batch_size: ``|L|``, what the noised sum is divided by; ``None`` uses
            ``data.batch_size`` in a federated run (its Poisson batches' expected size) and the
            batch's own number of examples outside one.
        ffa_lora: Freeze LoRA ``A``; only ``B`` is trained and sent (FFA-LoRA).
        seed: Seed of the noise and the Poisson batches; ``None`` (default): secret, from the
            run's secret (:mod:`~lightning_fed.privacy.secret`). A given seed is for tests only.
    """

    clip_norm: float = 1.0
    noise_multiplier: float | None = None
    target_epsilon: float | None = None
    expected_batch_size: int | None = None
    ffa_lora: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        if problems := dp_sgd_problems(**vars(self)):  # lightning_fed/dp_sgd_rules.py, the precheck's too
            raise ValueError("; ".join(problems))


torch.serialization.add_safe_globals([DPSGDSettings])  # saved in the hyper-parameters of checkpoints

_NOISE_TAG = 0x4450_5347  # separates DP-SGD's noise seeds from the other per-round seeds
_NO_TURN = 0x4E54  # a step outside a federated turn (plain Lightning training)
_BATCH_TAG = 0x4250  # separates the Poisson batches' seeds from the noise's
#: What checkpoints of earlier versions held the noise seed under (dropped when one is loaded).
NOISE_SEED_KEY = "dp_sgd_noise_seed"


def repeated_examples(batch: Mapping[str, Tensor], n: int) -> Tensor:
    """``(n,)`` bool: example ``i`` equals an earlier example of the batch (every field of length ``n``).

    A client's batches run through its examples in passes that continue across batch
    boundaries (:class:`~lightning_fed.datamodules.round_sampler.RoundBatchSampler`), so where a
    pass ends inside a batch one example can be in it twice; counted twice, it would move the
    step by up to 2C where the accountant assumes C. Equal rows within one batch are padded alike,
    so comparing them is exact.
    """
    fields = [v.detach().reshape(n, -1) for v in batch.values() if isinstance(v, Tensor) and v.dim() and len(v) == n]
    rows = torch.cat([f.to(torch.float64) for f in fields], dim=1) if fields else torch.zeros(n, 0)
    seen: set[bytes] = set()
    repeated = torch.zeros(n, dtype=torch.bool)
    for i in range(n):
        key = rows[i].cpu().numpy().tobytes()
        repeated[i] = key in seen
        seen.add(key)
    return repeated


def privatize_per_example(
    per_example: Mapping[str, Tensor],
    clip_norm: float,
    noise_multiplier: float,
    batch_size: float,
    generator: np.random.Generator | torch.Generator | None = None,
) -> tuple[StateDict, Tensor]:
    """Clip each example's gradient, sum, add ``N(0, z^2 C^2)``, divide by ``batch_size`` (Algorithm 1).

    Args:
        per_example: ``{name: (n, *shape)}``, row ``i`` the gradient of example ``i``.
        clip_norm: ``C``.
        noise_multiplier: ``z``.
        batch_size: The lot size ``|L|`` the noised sum is divided by.
        generator: Source of the noise (a run's: a secret draw's numpy generator; a torch CPU one in
            tests); drawn on the CPU, then moved to the gradients' device.

    Returns:
        The noised mean gradient ``{name: shape}`` and the per-example norms before clipping.
    """
    first = next(iter(per_example.values()))
    sq = torch.zeros(first.shape[0], dtype=torch.float32, device=first.device)
    for g in per_example.values():
        sq += g.detach().float().flatten(1).pow(2).sum(1)
    norms = sq.sqrt()
    factors = per_example_clip_factors(norms, clip_norm)  # min(1, C / ||g_i||)
    out: StateDict = {}
    for name, g in per_example.items():
        summed = torch.einsum("n,n...->...", factors, g.detach().float())
        # drawn on the CPU (the generator is a CPU one), then moved: LoRA-sized, so cheap
        noise = standard_normal(summed.shape, generator).to(summed.device) * (noise_multiplier * clip_norm)
        out[name] = ((summed + noise) / float(batch_size)).to(g.dtype)
    return out, norms


def example_level_accountant(
    settings: DPSGDSettings, batch_size: int, smallest_client_examples: int, delta: float
) -> PrivacyAccountant:
    """The accountant of one client's DP-SGD with a given ``z``: one step per local optimizer step,
    rate ``B / |D_k|``. Runs account per client (:class:`~lightning_fed.privacy.example_budget.ExampleBudget`).

    The amplification by ``B / |D_k|`` assumes Poisson batches (Opacus' ``DPDataLoader``), which
    is how a federated run draws them, from secret randomness (see the module docstring).
    """
    if settings.noise_multiplier is None:
        raise ValueError("example_level_accountant needs model.dp_sgd.noise_multiplier (a budget: ExampleBudget)")
    rate = min(1.0, batch_size / float(smallest_client_examples))
    return PrivacyAccountant(settings.noise_multiplier, rate, delta)


def check_trainer_for_dp_sgd(accumulate_grad_batches: int, world_size: int) -> None:
    """DP-SGD replaces each step's gradient after the backward pass, so it needs one batch per
    step and one process: gradient accumulation would be overwritten, and DDP would average
    the plain gradients across ranks before each rank privatizes only its own examples."""
    problems = []
    if accumulate_grad_batches != 1:
        problems.append(f"trainer.accumulate_grad_batches must be 1, got {accumulate_grad_batches}")
    if world_size != 1:
        problems.append(f"one process only (trainer.devices * trainer.num_nodes), got world size {world_size}")
    if problems:
        raise ValueError("model.dp_sgd: " + "; ".join(problems))


class ExampleLevelDP:
    """Mixin for a :class:`~lightning_fed.modules.base.FederatedModule` objective: DP-SGD steps.

    The objective provides :meth:`per_example_losses` (``(n,)``, one loss per example) and
    :meth:`rows_to_examples` (how the rows of its forward map to examples). The mixin sums the
    losses, and after the backward pass replaces every trainable ``p.grad`` by the clipped,
    noised mean (``on_after_backward``, so that a server algorithm's gradient correction, e.g.
    SCAFFOLD's, is applied afterwards, on the privatized gradient).

    Args:
        dp_sgd: The DP-SGD settings (:class:`DPSGDSettings`).
    """

    def __init__(self, *args: Any, dp_sgd: DPSGDSettings | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = DPSGDSettings(**dp_sgd) if isinstance(dp_sgd, dict) else dp_sgd or DPSGDSettings()
        self.dp_sgd = settings
        if settings.ffa_lora:
            for name, p in self.model.named_parameters():
                if "lora_A" in name:
                    p.requires_grad_(False)
        #: Seed of the noise and of the Poisson batches (secret unless ``dp_sgd.seed`` is set); never
        #: in the checkpoint (a run sets it from its secret, :class:`~lightning_fed.privacy.run.RunPrivacy`).
        self.noise_seed: int | SecretSeed = SecretSeed.fresh() if settings.seed is None else int(settings.seed)
        self.__dict__["_grad_sampler"] = None
        #: Per-example gradient norms (before clipping) of the last step, for monitoring.
        self.last_example_norms: Tensor | None = None
        #: The run's DP-SGD plan (``delta``, rounds, local steps): set by the run's privacy
        #: (:meth:`~lightning_fed.privacy.run.RunPrivacy.plan_example_budget`) in both transports.
        self.example_budget: ExampleBudget | None = None

    def is_shared(self, name: str) -> bool:
        """FFA-LoRA exchanges only ``B``: the frozen ``A`` is the same seeded tensor on every client."""
        return super().is_shared(name) and not (self.dp_sgd.ffa_lora and "lora_A" in name)

    def per_example_losses(self, batch: dict[str, Tensor]) -> Tensor:
        """``(n,)``: one loss per example of ``batch`` (a DPO example is the pair).

        The objective's half of the mixin: :class:`DPSFTModule` and :class:`DPDPOModule` define it.
        """
        raise NotImplementedError(f"{type(self).__name__} must define per_example_losses (see ExampleLevelDP)")

    def rows_to_examples(self, grad_sample: Tensor, num_examples: int) -> Tensor:
        """``(rows, ...)`` per-row gradients to ``(num_examples, ...)``: one row per example by default."""
        return grad_sample

    def _attach(self) -> None:
        if self.__dict__["_grad_sampler"] is None:
            # Hooks on the trainable layers only (the LoRA Linear layers); the frozen backbone's
            # buffers (masks, rotary tables) do not mix examples, hence strict=False.
            self.__dict__["_grad_sampler"] = GradSampleModule(
                self.model, batch_first=True, loss_reduction="sum", strict=False
            )

    def _trainer_and_turn(self) -> tuple[Any, Any]:
        try:
            trainer = self.trainer
        except RuntimeError:  # not attached to a Trainer (a step driven by hand)
            trainer = None
        driver = find_driver(trainer)
        return trainer, (driver.turn if driver is not None else None)

    def noise_multiplier_now(self) -> float:
        """``z`` of this step: the given one, or the one calibrated for the client in training
        (:meth:`ExampleBudget.noise_multiplier_for` of its example count)."""
        if self.dp_sgd.noise_multiplier is not None:
            return float(self.dp_sgd.noise_multiplier)
        _, turn = self._trainer_and_turn()
        if self.example_budget is None or turn is None:
            raise RuntimeError(
                "model.dp_sgd.target_epsilon calibrates each client's noise in a federated run (FederatedLoop or"
                " the Flower client); give model.dp_sgd.noise_multiplier to train outside one"
            )
        return self.example_budget.noise_multiplier_for(turn.num_examples)

    def noise_generator(self) -> np.random.Generator:
        """The generator of this step's noise: the secret draw ``(seed, round, client, local step)``
        of the turn in progress, or ``(seed, epoch, global step)`` outside a federated turn."""
        trainer, turn = self._trainer_and_turn()
        if turn is not None:
            key = (turn.round_idx, turn.client_id, turn.steps)  # steps: those before this one
        elif trainer is not None:
            key = (_NO_TURN, trainer.current_epoch, trainer.global_step)
        else:
            key = (_NO_TURN,)
        return as_secret_seed(self.noise_seed).generator("dp-sgd noise", _NOISE_TAG, *key)

    def poisson_batch_seed(self, round_idx: int) -> SecretSeed:
        """The secret seed of round ``round_idx``'s Poisson batches (read by
        :func:`~lightning_fed.federation.round_plan.poisson_batch_seed`)."""
        return as_secret_seed(self.noise_seed).child("poisson batches", _BATCH_TAG, int(round_idx))

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        checkpoint.pop(NOISE_SEED_KEY, None)  # an earlier version's: a secret no checkpoint may hold

    def on_fit_start(self) -> None:
        """Refuse the trainer settings under which replacing ``p.grad`` after backward would be wrong."""
        super().on_fit_start()
        check_trainer_for_dp_sgd(self.trainer.accumulate_grad_batches, self.trainer.world_size)

    def expected_batch_size(self, n: int) -> float:
        """What the noised sum is divided by: ``dp_sgd.expected_batch_size``, else ``B`` in a federated
        turn (Poisson batches, of expected size ``B``), else the batch's own ``n`` (at least 1)."""
        if self.dp_sgd.expected_batch_size:
            return float(self.dp_sgd.expected_batch_size)
        _, turn = self._trainer_and_turn()
        if turn is not None and self.example_budget is not None:
            return float(self.example_budget.batch_size)
        return float(max(n, 1))

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        if EMPTY_BATCH in batch:  # a Poisson draw of no example: the step is the noise alone
            self.__dict__["_num_examples"], self.__dict__["_repeated"] = 0, None
            return sum((p * 0.0).sum() for p in self.parameters() if p.requires_grad)
        self._attach()
        losses = self.per_example_losses(batch)
        self.__dict__["_num_examples"] = losses.shape[0]
        self.__dict__["_repeated"] = repeated_examples(batch, losses.shape[0])
        loss = losses.mean()
        self.log("train/loss", loss, prog_bar=True, batch_size=losses.shape[0])
        return loss  # the mean, as the plain objective reports it; on_after_backward undoes the 1/n

    def on_after_backward(self) -> None:
        n = self.__dict__.get("_num_examples")
        params = {name: p for name, p in self.named_parameters() if p.requires_grad}
        per_example = {}
        for name, p in params.items():
            if n == 0:  # an empty batch: no example, no per-example gradient
                per_example[name] = torch.zeros((0, *p.shape), device=p.device, dtype=torch.float32)
                continue
            gs = getattr(p, "grad_sample", None)
            if gs is None:
                raise RuntimeError(
                    f"DP-SGD: no per-example gradient for {name} (is it inside an Opacus-supported layer?)"
                )
            # the backward ran on mean_i loss_i, so row i holds grad loss_i / n
            per_example[name] = self.rows_to_examples(gs, n) * n
            p.grad_sample = None
        repeated = self.__dict__.get("_repeated")
        if repeated is not None and bool(repeated.any()):  # an example counts once per step
            keep = (~repeated).to(torch.float32)
            per_example = {
                k: g * keep.to(g.device, g.dtype).view(-1, *[1] * (g.dim() - 1)) for k, g in per_example.items()
            }
        batch_size = self.expected_batch_size(n)
        noised, norms = privatize_per_example(
            per_example, self.dp_sgd.clip_norm, self.noise_multiplier_now(), batch_size, self.noise_generator()
        )
        for name, p in params.items():
            p.grad = noised[name].to(p.device)
        self.last_example_norms = norms


class DPSFTModule(ExampleLevelDP, SFTModule):
    """FedIT's SFT objective with DP-SGD: an example is one instruction-response record.

    Its loss is the mean NLL of its own response tokens (see the module docstring).
    """

    def per_example_losses(self, batch: dict[str, Tensor]) -> Tensor:
        logps, mask = token_log_probs(self(batch), batch["labels"])
        return -logps.sum(-1) / mask.sum(-1).clamp(min=1)


class DPDPOModule(ExampleLevelDP, DPOModule):
    """FedDPO's objective with DP-SGD: an example is one preference pair (chosen and rejected)."""

    #: A row per pair: per-example gradients are per row, so pairs are not packed into shared rows.
    pack_rows = False

    def per_example_losses(self, batch: dict[str, Tensor]) -> Tensor:
        return self.pair_metrics(batch)["loss"]

    def rows_to_examples(self, grad_sample: Tensor, num_examples: int) -> Tensor:
        """The shared-prefix forward (:mod:`~lightning_fed.modules.shared_prefix`) holds one row per
        pair: row ``i`` is pair ``i``. The concatenated forward holds chosen rows then rejected rows:
        pair ``i`` is rows ``i`` and ``B + i``."""
        if grad_sample.shape[0] == num_examples:
            return grad_sample
        chosen, rejected = grad_sample[:num_examples], grad_sample[num_examples:]
        return chosen + rejected
