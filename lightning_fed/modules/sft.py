"""FedIT's local objective: supervised fine-tuning on response tokens (OpenFedLLM)."""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.batching.client_rows import client_count, per_client_loss
from lightning_fed.modules.base import FederatedModule
from lightning_fed.modules.losses import token_log_probs, token_nll
from lightning_fed.modules.scored_logits import ScoredLogits, scored_logits


class SFTModule(FederatedModule):
    """Instruction tuning: next-token cross-entropy on the response, the prompt masked.

    Validation reports per example ``loss`` (mean response-token NLL) and ``token_acc``
    (greedy next-token accuracy on response tokens).
    """

    batchable = True  # its training loss is per_client_loss of the token NLL (docs/developer/batching.md)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """The logits of every position, ``(B, T, V)``."""
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits

    def scored(self, batch: dict[str, Tensor]) -> ScoredLogits:
        """The logits of the response positions only (:mod:`~lightning_fed.modules.scored_logits`)."""
        return scored_logits(self.model, batch["input_ids"], batch["attention_mask"], batch["labels"])

    def client_losses(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The mean response-token NLL of each client of the batch, summed over clients
        (:func:`~lightning_fed.batching.client_rows.per_client_loss`; one client: its mean)."""
        ids = batch.get("client_id")
        if not self.scored_head:  # every position's logits (the path before issue 43)
            nll, mask = token_nll(self(batch), batch["labels"])
            return per_client_loss(nll, ids, mask)
        scored = self.scored(batch)
        return per_client_loss(scored.spread(scored.nll()), ids, scored.mask)

    def loss(self, batch: dict[str, Tensor]) -> Tensor:
        """The training loss of ``batch`` (each client's token mean, summed over its clients)."""
        return self.client_losses(batch)["loss"]

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        out = self.client_losses(batch)
        shown = out["loss"].detach() / client_count(out)  # the clients' mean, not their sum
        self.log("train/loss", shown, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return out

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
