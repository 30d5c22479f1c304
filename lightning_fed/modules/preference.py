"""The chosen/rejected forward every preference objective shares.

A preference batch holds ``chosen_{input_ids,attention_mask,labels}`` and
``rejected_{...}`` (see :mod:`lightning_fed.datamodules.tokenize`). Objectives run chosen and
rejected through the model in one concatenated forward (one kernel launch per layer instead
of two, as in TRL's ``concatenated_forward``) and split the result: :func:`concatenated_inputs`
builds that input, :func:`concatenated_log_probs` returns ``log p(y_w|x)`` and ``log p(y_l|x)``.
A new preference loss (ORPO, SimPO, KTO, IPO...) starts from these instead of copying the forward,
and subclasses :class:`PreferenceModule`, which turns its ``pair_metrics`` into the training and
validation steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn

from lightning_fed.batching.client_rows import per_client_loss
from lightning_fed.modules.base import FederatedModule
from lightning_fed.modules.losses import IGNORE_INDEX, sequence_log_probs
from lightning_fed.modules.scored_logits import scored_logits
from lightning_fed.modules.shared_prefix import pack_capacity, pair_layout, shared_log_probs, supports_shared_prefix

PAIR_FIELDS = ("input_ids", "attention_mask", "labels")


def zero_dropout(model: nn.Module) -> None:
    """Zero every dropout of ``model``: ``nn.Dropout`` modules and Llama-style attention's float
    ``attention_dropout`` (applied functionally). Preference objectives compare log-probs of two
    forwards, which dropout would make noisy."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        if isinstance(getattr(m, "attention_dropout", None), float):
            m.attention_dropout = 0.0


def concatenated_inputs(batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``input_ids``, ``attention_mask`` and ``labels`` of shape ``(2B, T)``: chosen rows, then rejected."""
    return {key: torch.cat([batch[f"chosen_{key}"], batch[f"rejected_{key}"]]) for key in PAIR_FIELDS}


def concatenated_log_probs(
    model: Callable[..., object],
    batch: Mapping[str, Tensor],
    average: bool = False,
    scored_only: bool = True,
    shared_prefix: bool = False,
    pack: bool = True,
) -> tuple[Tensor, Tensor]:
    """``(log p(y_w|x), log p(y_l|x))``, each ``(B,)``, from one forward of ``model``.

    Args:
        model: A causal LM called as ``model(input_ids=..., attention_mask=...)`` with a
            ``.logits`` output (a Hugging Face / PEFT model).
        batch: A preference batch (``chosen_*`` and ``rejected_*`` keys).
        average: Divide each sum by the number of scored response tokens (the length
            normalisation of ORPO and SimPO) instead of returning the sum.
        scored_only: Run the LM head on the response positions only
            (:func:`~lightning_fed.modules.scored_logits.scored_logits`); ``False`` runs it on every
            position (the path before issue 43, kept for ``benchmarks/step_flops.py`` and the tests
            that show both give the same values).
        shared_prefix: Run each pair as one sequence, its prompt once
            (:mod:`~lightning_fed.modules.shared_prefix`), where the model and the batch allow it
            (with ``scored_only`` only); else the concatenated forward.
    """
    inputs = concatenated_inputs(batch)
    layout = None
    if scored_only and shared_prefix and supports_shared_prefix(model):
        layout = pair_layout(batch, batch.get("client_id"), pack_capacity(model) if pack else None)
    if layout is not None:
        logps = shared_log_probs(model, batch, layout)
    elif scored_only:
        logps = scored_logits(
            model, inputs["input_ids"], inputs["attention_mask"], inputs["labels"]
        ).sequence_log_probs()
    else:
        logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
        logps = sequence_log_probs(logits, inputs["labels"])
    if average:
        logps = logps / response_lengths(inputs["labels"])
    return logps.chunk(2)


def response_lengths(labels: Tensor) -> Tensor:
    """Scored (next-token) response tokens per sequence, at least 1: the ``|y|`` of a length-averaged
    log-probability, as :func:`concatenated_log_probs` divides by it for ``average=True``."""
    return (labels[:, 1:] != IGNORE_INDEX).sum(-1).clamp(min=1)


class PreferenceModule(FederatedModule):
    """A local objective over preference pairs, defined by its ``pair_metrics(batch)``.

    ``pair_metrics`` returns ``{name: (B,) tensor}`` with the per-pair ``loss`` and any other
    metrics (DPO's, ORPO's and SimPO's share ``reward_margin``, ``reward_acc`` and ``pref_acc``). A
    training step logs every metric's mean as ``train/<name>`` and returns the mean loss; a
    validation step returns the per-pair values, which the loop averages per client.
    """

    #: Whether each pair runs as one sequence with its prompt once (issue 43,
    #: :mod:`~lightning_fed.modules.shared_prefix`; exact to float rounding), where the model allows
    #: it. ``False`` runs chosen and rejected as two rows of the concatenated forward, the path before.
    shared_prefix: bool = True
    #: Whether, with ``shared_prefix``, a client's pairs are packed into rows without padding between
    #: them (:func:`~lightning_fed.modules.shared_prefix.pack_rows`; exact to float rounding).
    pack_rows: bool = True

    #: The loss is a function of each pair alone, reduced by the one per-client reduction below:
    #: a subclass that only changes ``pair_metrics`` trains with others (docs/developer/batching.md).
    batchable = True

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        metrics = self.pair_metrics(batch)
        bs = metrics["loss"].shape[0]
        for name, value in metrics.items():
            self.log(f"train/{name}", value.mean(), prog_bar=name in ("loss", "reward_acc"), batch_size=bs)
        return per_client_loss(metrics["loss"], batch.get("client_id"))  # one client: the mean

    @torch.no_grad()
    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        return self.pair_metrics(batch)

    def sequence_log_probs(self, batch: dict[str, Tensor], average: bool = False) -> tuple[Tensor, Tensor]:
        """``(log p(y_w|x), log p(y_l|x))`` under the current model, summed over response tokens
        (``average``: divided by the response lengths, ORPO's and SimPO's), in one forward (the
        evaluation's contract: :mod:`~lightning_fed.evaluation.test_step`)."""
        return concatenated_log_probs(
            self.model,
            batch,
            average=average,
            scored_only=self.scored_head,
            shared_prefix=self.shared_prefix,
            pack=self.pack_rows,
        )
