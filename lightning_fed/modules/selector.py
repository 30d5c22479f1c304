"""The binary selector of FedBis / FedBiscuit (Wu et al., 2024, arXiv:2407.03038).

A causal LM reads the selector prompt of the paper's Figure 4 (query, response A,
response B, ``YOUR CHOICE:``) and answers with one token, ``A`` or ``B``. Training is
cross-entropy over the logits of just those two tokens at the last prompt position
(Eq. (3)'s ``l_CE(i | phi; x, y_0, y_1)``). Every pair is scored in both orders in the same
batch (the data module builds ``ab_*`` and ``ba_*`` fields), so the position of the
preferred response carries no signal and position bias cannot be learned.

FedBiscuit's U selectors are U named LoRA adapters on one frozen backbone
(``selector_0`` ... ``selector_{U-1}``); :meth:`BinarySelectorModule.use_selector`
switches the one that runs and trains.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from lightning_fed.batching.client_rows import per_client_loss
from lightning_fed.modules.backbone import BackboneConfig
from lightning_fed.modules.base import FederatedModule
from lightning_fed.modules.lora import LoraSettings, add_adapter, is_adapter_param
from lightning_fed.modules.scored_logits import head_on_positions, output_head
from lightning_fed.option_rules import SELECTOR_OWN, check


def selector_name(u: int) -> str:
    """The PEFT adapter name of selector ``u``."""
    return f"selector_{u}"


def choice_logits(logits: Tensor, attention_mask: Tensor, choice_ids: tuple[int, int]) -> Tensor:
    """``(B, 2)`` logits of the answer tokens ``A`` and ``B`` at each row's last real position."""
    last = attention_mask.sum(dim=1) - 1  # right padding
    final = logits[torch.arange(logits.shape[0], device=logits.device), last]
    return final[:, list(choice_ids)]


def answer_token_ids(tokenizer: Any) -> tuple[int, int]:
    """Ids of the answers after ``YOUR CHOICE:``: `` A``/`` B`` for BPE vocabularies, else ``A``/``B``."""
    for a, b in ((" A", " B"), ("A", "B")):
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in (a, b)]
        if all(len(i) == 1 for i in ids):
            return ids[0][0], ids[1][0]
    raise ValueError(f"the tokenizer must encode 'A' and 'B' as one token each, got {ids}")


def selector_loss(logits_ab: Tensor, logits_ba: Tensor, label_ab: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-pair CE over both orders, accuracy and order consistency.

    Args:
        logits_ab: ``(B, 2)`` choice logits with the pair in its stored order.
        logits_ba: ``(B, 2)`` choice logits with the two responses swapped.
        label_ab: ``(B,)`` index (0 for A, 1 for B) of the preferred response in order AB.

    Returns:
        ``(loss, acc, consistency)``, each ``(B,)``: the mean CE of the two orders; the mean
        correctness of the two answers; 1 where both orders pick the same response.
    """
    label_ba = 1 - label_ab
    loss = 0.5 * (
        F.cross_entropy(logits_ab, label_ab, reduction="none") + F.cross_entropy(logits_ba, label_ba, reduction="none")
    )
    pred_ab, pred_ba = logits_ab.argmax(-1), logits_ba.argmax(-1)
    acc = 0.5 * ((pred_ab == label_ab).float() + (pred_ba == label_ba).float())
    consistency = (pred_ab != pred_ba).float()  # swapping the order must swap the letter
    return loss, acc, consistency


class BinarySelectorModule(FederatedModule):
    """LoRA binary selector(s): which of two responses is better, ``A`` or ``B``.

    Metrics, per pair: ``loss``, ``acc`` (mean of both orders) and ``consistency`` (the same
    response is picked in both orders).

    Args:
        num_selectors: U, the number of LoRA selectors on the backbone (1 for FedBis).

    ``backbone``, ``lora``, ``lr``, ``weight_decay`` and ``optimizer`` are those of
    :class:`~lightning_fed.modules.base.FederatedModule`.
    """

    batchable = True  # its training loss is per_client_loss of each pair's (docs/developer/batching.md)

    def __init__(
        self,
        backbone: BackboneConfig,
        lora: LoraSettings | None = None,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        optimizer: str = "adamw",
        num_selectors: int = 1,
    ) -> None:
        # FedBiscuit labels pairs by majority vote of the U selectors: an even U can tie.
        check(SELECTOR_OWN, num_selectors=num_selectors)
        super().__init__(backbone, lora=lora, lr=lr, weight_decay=weight_decay, optimizer=optimizer)
        self.num_selectors = num_selectors
        for u in range(1, num_selectors):
            add_adapter(self.model, self.lora_settings, selector_name(u))
        self.active_selector = 0
        self.client_selectors: Mapping[int, int] = {}  # client -> selector, for evaluation
        self._set_active(0)
        self.choice_ids = answer_token_ids(self.tokenizer)

    # ------------------------------------------------------------------------ selectors
    def adapter_of(self, name: str) -> int:
        """The selector index owning parameter ``name`` (the first adapter is PEFT's ``default``)."""
        for u in range(1, self.num_selectors):
            if f".{selector_name(u)}." in name:
                return u
        return 0

    def selector_keys(self, u: int, keys: Any) -> list[str]:
        """The parameter names among ``keys`` that belong to selector ``u``."""
        return [k for k in keys if is_adapter_param(k) and self.adapter_of(k) == u]

    def _set_active(self, u: int) -> None:
        name = "default" if u == 0 else selector_name(u)
        self.model.base_model.set_adapter(name)
        # PEFT freezes the inactive adapters; keep every adapter in the optimizer instead:
        # an adapter outside the forward gets no gradient, so the optimizer leaves it alone.
        for n, p in self.model.named_parameters():
            p.requires_grad_(is_adapter_param(n))
        self.active_selector = u

    def use_selector(self, u: int) -> None:
        """Run and train selector ``u`` from now on."""
        if not 0 <= u < self.num_selectors:
            raise ValueError(f"selector must be in [0, {self.num_selectors}), got {u}")
        if u != self.active_selector:
            self._set_active(u)

    # ------------------------------------------------------------------------- objective
    def choice_forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        """``(B, 2)`` answer logits; the LM head projects only each row's last real position
        (:func:`~lightning_fed.modules.scored_logits.head_on_positions`), not every position onto
        the whole vocabulary."""
        last = mask.sum(dim=1) - 1  # right padding
        keep = torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
        keep[torch.arange(ids.shape[0], device=ids.device), last] = True
        head = output_head(self.model) if self.scored_head else None
        if head is None:  # every position's logits, then the answer position's
            return choice_logits(self.model(input_ids=ids, attention_mask=mask).logits, mask, self.choice_ids)
        with head_on_positions(head, keep):
            logits = self.model(input_ids=ids, attention_mask=mask).logits  # (1, B, V): one row each
        return logits[0][:, list(self.choice_ids)]

    def choice_logits(self, batch: Mapping[str, Tensor], order: str) -> Tensor:
        return self.choice_forward(batch[f"{order}_input_ids"], batch[f"{order}_attention_mask"])

    def pair_metrics(self, batch: Mapping[str, Tensor]) -> dict[str, Tensor]:
        # One forward over both orders (same width: the collator pads ab_ and ba_ together).
        ids = torch.cat([batch["ab_input_ids"], batch["ba_input_ids"]])
        mask = torch.cat([batch["ab_attention_mask"], batch["ba_attention_mask"]])
        logits = self.choice_forward(ids, mask)
        logits_ab, logits_ba = logits.chunk(2)
        loss, acc, consistency = selector_loss(logits_ab, logits_ba, batch["label"])
        return {"loss": loss, "acc": acc, "consistency": consistency}

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        metrics = self.pair_metrics(batch)
        bs = metrics["loss"].shape[0]
        for name, value in metrics.items():
            self.log(f"train/{name}", value.mean(), prog_bar=name in ("loss", "acc"), batch_size=bs)
        return per_client_loss(metrics["loss"], batch.get("client_id"))  # one client: the mean

    @property
    def evaluates_per_client(self) -> bool:
        """Clients judged by their own selector: evaluation batches hold one client each."""
        return bool(self.client_selectors)

    @torch.no_grad()
    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        if self.client_selectors and "client_id" in batch:  # each client is judged by its own selector
            self.use_selector(self.client_selectors.get(int(batch["client_id"][0]), self.active_selector))
        return self.pair_metrics(batch)

    @torch.no_grad()
    def preference_probs(self, batch: Mapping[str, Tensor]) -> Tensor:
        """``(B,)`` probability that response A is better, averaged over both orders."""
        p_ab = self.choice_logits(batch, "ab").softmax(-1)[:, 0]
        p_ba = self.choice_logits(batch, "ba").softmax(-1)[:, 1]
        return 0.5 * (p_ab + p_ba)
