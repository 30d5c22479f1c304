"""Preference data (FedDPO, FedPDPO): ``prompt``, ``chosen``, ``rejected``."""

from __future__ import annotations

from typing import Any

from lightning_fed.datamodules.federated import FederatedDataModule
from lightning_fed.datamodules.templates import format_prompt, format_response
from lightning_fed.datamodules.tokenize import tokenize_preference


class PreferenceDataModule(FederatedDataModule):
    """Federated preference pairs; the prompt is formatted with :attr:`template`.

    With ``template: chat`` the prompt is the user turn and each response an assistant turn
    of the tokenizer's chat template; ``log p(y|x)`` covers the assistant turn only.
    """

    kind = "preference"
    default_template = "plain"

    def __init__(self, dataset: str = "synthetic:preferences", **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)

    def encode(self, record: dict[str, Any]) -> dict[str, list[int]]:
        tok, system = self.tokenizer, self.system_prompt
        prompt = format_prompt(self.template, record["prompt"], "", tok, system)
        chosen, rejected = (
            format_response(self.template, record["prompt"], record[k], "", tok, system, prompt)
            for k in ("chosen", "rejected")
        )
        return tokenize_preference(
            prompt,
            chosen,
            rejected,
            tok,
            self.max_length,
            self.on_overflow,
            self.truncation,
            self._note_truncation,
            **self.length_budget(),
        )
