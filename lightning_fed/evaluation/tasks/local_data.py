"""Datasets of the shipped local lm-eval tasks, read from the JSONL files beside this file.

lm-eval's ``dataset_path: json`` resolves ``data_files`` against the working directory, so a
task shipped inside a package names its data through ``custom_dataset: !function
local_data.<name>`` instead (``!function`` is resolved against the YAML's folder). A task of
your own can point at its files directly: ``dataset_path: json`` with absolute
``dataset_kwargs.data_files`` (see docs/guides/evaluation.md, "Evaluating a run").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets

HERE = Path(__file__).resolve().parent


def arithmetic(**_: Any) -> datasets.DatasetDict:
    """60 arithmetic questions (``question``, ``choices``, ``label``, ``answer``) as a ``test`` split.

    lm-eval passes the task's metadata as keyword arguments; they are not needed here.
    """
    return datasets.DatasetDict({"test": datasets.Dataset.from_json(str(HERE / "arithmetic.jsonl"))})
