"""Instruction data (FedIT): ``instruction``, optional ``input``, ``output``."""

from __future__ import annotations

from typing import Any

from lightning_fed.datamodules.federated import FederatedDataModule
from lightning_fed.datamodules.templates import format_prompt, format_response
from lightning_fed.datamodules.tokenize import tokenize_sft


class InstructionDataModule(FederatedDataModule):
    """Federated instruction data, formatted with :attr:`template` (Alpaca by default).

    With ``template: chat`` the instruction (and input) is the user turn and the output the
    assistant turn of the tokenizer's chat template; the loss covers the assistant turn only.
    """

    kind = "instruction"

    def __init__(self, dataset: str = "synthetic:instructions", **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)

    def encode(self, record: dict[str, Any]) -> dict[str, list[int]]:
        instruction, context = record["instruction"], record.get("input") or ""
        prompt = format_prompt(self.template, instruction, context, self.tokenizer, self.system_prompt)
        response = format_response(
            self.template, instruction, record["output"], context, self.tokenizer, self.system_prompt, prompt
        )
        return tokenize_sft(
            prompt,
            response,
            self.tokenizer,
            self.max_length,
            self.on_overflow,
            self.truncation,
            self._note_truncation,
            **self.length_budget(),
        )
