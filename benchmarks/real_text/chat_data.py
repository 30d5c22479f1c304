"""Workaround data modules for the real-text benchmark (issue 16): chat template + test file.

The package (at the time of writing) has neither ``data.template: chat`` nor a way to name a
separate test file: validation is a random ``val_fraction`` of the training rows. These two
subclasses add both, without touching the package, so that ``lightning-fed fit`` evaluates
every client on *its own rows of a separate test file* (before round 1 = the base model, and
after every round), with personal parts swapped in by the FederatedLoop as usual:

- ``template: chat`` formats the prompt with the tokenizer's own chat template
  (``apply_chat_template(..., add_generation_prompt=True)``; ``system_prompt`` optional, the
  template's default otherwise). Responses end with the tokenizer's EOS (``<|im_end|>`` for
  SmolLM2-Instruct), which is the turn end of ChatML.
- ``test_file``: a second local file with the same columns. Its rows are partitioned with the
  same partitioner (use ``ByKey`` on a column whose values match the training file's) and
  become each client's validation set; ``val_fraction`` must then be 0.

Used from the configs by class path (``PYTHONPATH=benchmarks/real_text``):
``class_path: chat_data.ChatPreferenceData`` / ``chat_data.ChatInstructionData``.
"""

from __future__ import annotations

from typing import Any

from lightning_fed.datamodules import InstructionDataModule, PreferenceDataModule
from lightning_fed.datamodules.federated import _ListDataset
from lightning_fed.datamodules.partition import IID, ByColumn, check_partition
from lightning_fed.datamodules.sources import load_records
from lightning_fed.datamodules.templates import format_prompt
from lightning_fed.datamodules.tokenize import tokenize_preference, tokenize_sft


class _ChatAndTestFile:
    """Mixin: chat-template prompts and per-client validation rows from a test file."""

    def _init_extra(self, test_file: str | None, system_prompt: str | None) -> None:
        if test_file is not None and self.val_fraction != 0:
            raise ValueError("data.test_file replaces val_fraction: set data.val_fraction=0")
        self.test_file, self.system_prompt = test_file, system_prompt

    def _prompt(self, instruction: str, input: str = "") -> str:  # noqa: A002
        if self.template != "chat":
            return format_prompt(self.template, instruction, input)
        text = instruction if not (input and input.strip()) else f"{instruction}\n\n{input}"
        messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + [{"role": "user", "content": text}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def setup(self, stage: str | None = None) -> None:
        fresh = not self.clients
        super().setup(stage)
        if not fresh or self.test_file is None:
            return
        records = load_records(self.test_file, self.kind, field_map=self.field_map)
        partition = self.partition or (ByColumn("client") if "client" in records.column_names else IID())
        parts = partition(records, self.num_clients, self.seed)
        check_partition(parts, self.num_clients, f"{type(partition).__name__} of data.test_file {self.test_file!r}")
        rows = records.to_list()
        for cid, indices in enumerate(parts):
            items = [{**self.encode(rows[i]), "client_id": cid} for i in indices]
            self.clients[cid].val_set = _ListDataset(items)


class ChatPreferenceData(_ChatAndTestFile, PreferenceDataModule):
    """:class:`PreferenceDataModule` with ``template: chat`` and ``test_file``.

    Args:
        test_file: Local file of test pairs (same columns as ``dataset``); its rows are each
            client's validation set.
        system_prompt: System message of the chat template (default: the template's own).
    """

    def __init__(self, dataset: str, test_file: str | None = None, system_prompt: str | None = None, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self._init_extra(test_file, system_prompt)

    def encode(self, record: dict[str, Any]) -> dict[str, list[int]]:
        return tokenize_preference(self._prompt(record["prompt"]), record["chosen"], record["rejected"], self.tokenizer, self.max_length, self.on_overflow)


class ChatInstructionData(_ChatAndTestFile, InstructionDataModule):
    """:class:`InstructionDataModule` with ``template: chat`` and ``test_file``.

    Args:
        test_file: Local file of test examples; each client's validation set.
        system_prompt: System message of the chat template (default: the template's own).
    """

    def __init__(self, dataset: str, test_file: str | None = None, system_prompt: str | None = None, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self._init_extra(test_file, system_prompt)

    def encode(self, record: dict[str, Any]) -> dict[str, list[int]]:
        return tokenize_sft(self._prompt(record["instruction"], record.get("input") or ""), record["output"], self.tokenizer, self.max_length, self.on_overflow)
