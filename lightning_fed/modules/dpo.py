"""FedDPO's local objective: Direct Preference Optimization (OpenFedLLM)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from lightning_fed.modules.dpo_losses import find_dpo_loss
from lightning_fed.modules.lora import adapter_layers, adapters_disabled
from lightning_fed.modules.losses import preference_metrics
from lightning_fed.modules.preference import (
    PreferenceModule,
    zero_dropout,
)
from lightning_fed.modules.reference_cache import DEFAULT_MEMORY_BYTES, ReferenceCache
from lightning_fed.option_rules import DPO_OWN, check


class DPOModule(PreferenceModule):
    """DPO against a frozen reference: the same model with its adapters disabled.

    Chosen and rejected go through one concatenated forward. Metrics, per pair:
    ``loss``; ``reward_margin`` (implicit reward of chosen minus rejected);
    ``reward_acc`` (margin > 0, ties count one half); ``pref_acc``
    (``log p(y_w|x) > log p(y_l|x)`` under the policy, the papers' preference accuracy).

    Args:
        beta: DPO inverse temperature.
        loss: The loss, by name (:mod:`~lightning_fed.modules.dpo_losses`): ``sigmoid`` (DPO),
            ``ipo``, ``hinge``, ``conservative`` (label smoothing), or a dotted path to a function
            of the same signature.
        loss_options: Keyword arguments of the loss (``conservative``: ``label_smoothing``).
        disable_dropout: Set every dropout probability of the model (LoRA's included) to 0, as
            TRL does for DPO: the policy and the reference then score the same tokens with the
            same deterministic network, and the implicit reward is not dropout noise.
        cache_reference: Compute each example's reference log-probs once and cache them
            (:class:`~lightning_fed.modules.reference_cache.ReferenceCache`, keyed by content).
            Default (``None``): on whenever it is exact, i.e. when no dropout is active in the
            backbone (the reference is then a fixed function of the example). ``true`` with
            active dropout is an error; ``false`` recomputes the reference on every step.
        reference_cache_bytes: In-memory budget of the cache (about 180 B per example);
            past it, entries spill to an SQLite file in ``reference_cache_dir``.
        reference_cache_dir: Folder of the spill file; default a temporary directory
            (under ``$TMPDIR``), deleted at exit.
        **kwargs: See :class:`~lightning_fed.modules.base.FederatedModule`.
    """

    def __init__(
        self,
        *args: Any,
        beta: float = 0.1,
        loss: str = "sigmoid",
        loss_options: dict[str, Any] | None = None,
        disable_dropout: bool = True,
        cache_reference: bool | None = None,
        reference_cache_bytes: int = DEFAULT_MEMORY_BYTES,
        reference_cache_dir: str | None = None,
        **kwargs: Any,
    ) -> None:
        check(DPO_OWN, beta=beta, reference_cache_bytes=reference_cache_bytes)  # before the backbone loads
        loss_fn = find_dpo_loss(loss, loss_options)
        super().__init__(*args, **kwargs)
        self.beta = beta
        #: The loss of each pair (:mod:`~lightning_fed.modules.dpo_losses`) and its options.
        self.loss_fn, self.loss_options = loss_fn, dict(loss_options or {})
        self._adapter_layers: list | None = None
        if disable_dropout:
            zero_dropout(self.model)
        # The reference runs with the adapters disabled, so only the backbone's dropout matters.
        active = [
            n
            for n, m in self.model.named_modules()
            if "lora_" not in n
            and ((isinstance(m, nn.Dropout) and m.p > 0) or getattr(m, "attention_dropout", 0.0) > 0)
        ]
        if cache_reference and active:
            raise ValueError(
                f"model.cache_reference=true needs a deterministic reference, but dropout is active in {active[0]}"
                " (and others): set model.disable_dropout=true or model.cache_reference=false"
            )
        self._cache_requested = cache_reference
        #: The reference log-probs cache, or ``None`` when the reference is recomputed every step.
        self.reference_cache = (
            ReferenceCache(reference_cache_bytes, reference_cache_dir)
            if (cache_reference if cache_reference is not None else not active)
            else None
        )

    def keep_no_example_record(self) -> None:
        """A private run has no reference cache (issue 40): the cache is keyed by each example's
        content, fills as examples are trained on and is saved in the checkpoint, so whoever holds
        the run folder could hash a client's data and learn whether that client was sampled (and
        which examples DP-SGD's Poisson batches took). The reference is recomputed every step;
        ``model.cache_reference=true`` in a private run is refused."""
        if self._cache_requested:
            raise ValueError(
                "model.cache_reference=true in a private run: the cache would record which examples were"
                " trained on in the checkpoint; set model.cache_reference=false (or leave it unset)"
            )
        if self.reference_cache is not None:
            self.reference_cache = None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.reference_cache is not None:  # resume serves the values the run computed (reference_cache.py)
            checkpoint["reference_cache"] = self.reference_cache.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        if self.reference_cache is not None and "reference_cache" in checkpoint:
            self.reference_cache.load_state_dict(checkpoint["reference_cache"])

    def reference_log_probs(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The same under the reference model (adapters disabled, no gradient), from the cache
        when the example was seen before (see ``cache_reference``)."""
        if self.reference_cache is None:
            return self.compute_reference_log_probs(batch)
        return self.reference_cache.log_probs(batch, self.compute_reference_log_probs)

    def compute_reference_log_probs(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """The reference forward itself: the model with its adapters disabled, no gradient."""
        if self._adapter_layers is None:
            self._adapter_layers = adapter_layers(self.model)
        with torch.no_grad(), adapters_disabled(self._adapter_layers):
            return self.sequence_log_probs(batch)

    def pair_metrics(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        chosen, rejected = self.sequence_log_probs(batch)
        ref_chosen, ref_rejected = self.reference_log_probs(batch)
        losses, r_chosen, r_rejected = self.loss_fn(
            chosen, rejected, ref_chosen, ref_rejected, self.beta, **self.loss_options
        )
        return preference_metrics(losses, r_chosen, r_rejected, chosen, rejected)
