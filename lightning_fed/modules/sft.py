"""FedIT's local objective: supervised fine-tuning on response tokens (OpenFedLLM)."""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_fed.batching.client_rows import rows_of
from lightning_fed.modules.base import FederatedModule
from lightning_fed.modules.losses import sft_client_loss, sft_loss, token_log_probs


class SFTModule(FederatedModule):
    """Instruction tuning: next-token cross-entropy on the response, the prompt masked.

    Validation reports per example ``loss`` (mean response-token NLL) and ``token_acc``
    (greedy next-token accuracy on response tokens).
    """

    #: Clients may train together (``federation.batch_clients``): the loss is reduced per client.
    batchable = True

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        rows = rows_of(self)  # a batched step: each client's token mean, summed over clients
        loss = (
            sft_loss(self(batch), batch["labels"])
            if rows is None
            else sft_client_loss(self(batch), batch["labels"], rows)
        )
        shown = loss if rows is None else loss.detach() / rows.size  # the clients' mean, not their sum
        self.log("train/loss", shown, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    @torch.no_grad()
    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        logits = self(batch)
        logps, mask = token_log_probs(logits, batch["labels"])
        n = mask.sum(-1).clamp(min=1)
        hits = (logits[:, :-1].argmax(-1) == batch["labels"][:, 1:]) & mask
        return {"loss": -logps.sum(-1) / n, "token_acc": hits.sum(-1) / n}
