"""FedIT's local objective: supervised fine-tuning on response tokens (OpenFedLLM)."""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.batching import client_rows
from lightning_fed.batching.client_rows import ClientRows, rows_of
from lightning_fed.modules.base import FederatedModule
from lightning_fed.modules.losses import sft_client_loss, sft_loss, token_log_probs
from lightning_fed.modules.scored_logits import ScoredLogits, scored_logits


class SFTModule(FederatedModule):
    """Instruction tuning: next-token cross-entropy on the response, the prompt masked.

    Validation reports per example ``loss`` (mean response-token NLL) and ``token_acc``
    (greedy next-token accuracy on response tokens).
    """

    #: Clients may train together (``federation.batch_clients``): the loss is reduced per client.
    batchable = True

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """The logits of every position, ``(B, T, V)``."""
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits

    def scored(self, batch: dict[str, Tensor]) -> ScoredLogits:
        """The logits of the response positions only (:mod:`~lightning_fed.modules.scored_logits`)."""
        return scored_logits(self.model, batch["input_ids"], batch["attention_mask"], batch["labels"])

    def loss(self, batch: dict[str, Tensor], rows: ClientRows | None = None) -> Tensor:
        """The mean response-token NLL (each client's, summed over clients, in a batched step)."""
        if not self.scored_head:  # every position's logits (the path before issue 43)
            logits = self(batch)
            return sft_loss(logits, batch["labels"]) if rows is None else sft_client_loss(logits, batch["labels"], rows)
        scored = self.scored(batch)
        nll = scored.nll()
        return nll.mean() if rows is None else client_rows.client_token_mean(scored.spread(nll), scored.mask, rows)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        rows = rows_of(self)  # a batched step: each client's token mean, summed over clients
        loss = self.loss(batch, rows)
        shown = loss if rows is None else loss.detach() / rows.size  # the clients' mean, not their sum
        self.log("train/loss", shown, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    @torch.no_grad()
    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        if self.scored_head:
            scored = self.scored(batch)
            (logps, mask), hits = scored.token_log_probs(), scored.hits()
        else:
            logits = self(batch)
            logps, mask = token_log_probs(logits, batch["labels"])
            hits = (logits[:, :-1].argmax(-1) == batch["labels"][:, 1:]) & mask
        n = mask.sum(-1).clamp(min=1)
        return {"loss": -logps.sum(-1) / n, "token_acc": hits.sum(-1) / n}
