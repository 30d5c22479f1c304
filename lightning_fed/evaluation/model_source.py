"""Which model ``lightning-fed evaluate`` scores (``--run``, or ``--model`` with ``--adapter``),
checked without torch: a bad option is one line in a fraction of a second (issue 41), before
:mod:`~lightning_fed.evaluation.run_model` imports torch, transformers and the modules to build it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lightning_fed.option_rules import DTYPES

ADAPTER_CONFIG = "adapter_config.json"
"""PEFT's config file of an adapter folder (``lightning_fed.modules.adapter_files.ADAPTER_CONFIG``)."""


@dataclass
class ModelSource:
    """Which model to evaluate: a finished run, or a base model with an optional PEFT adapter."""

    run: str | None = None
    """A finished run: its version folder (``config.yaml`` + ``adapter/`` or
    ``checkpoints/last.ckpt``), its ``adapter/`` folder, or a ``.ckpt`` file. Exclusive with
    ``model``."""

    model: str | None = None
    """A base model instead of a run: hub id, local folder or ``gguf:<package>/<file.gguf>``."""

    adapter: str | None = None
    """A PEFT adapter folder applied on ``model``."""

    tokenizer: str | None = None
    """Tokenizer of ``model`` (default: the model's own)."""

    seed: int | None = None
    """Seed a backbone built from ``backbone.config`` was built with. Default: the run's
    ``seed_everything`` (its ``config.yaml``) or the checkpoint's federation seed, else 0."""

    dtype: str = "float32"
    """Dtype of a model loaded by ``model``, one of float32, bfloat16, float16."""

    def __post_init__(self) -> None:
        problems = []
        if (self.run is None) == (self.model is None):
            given = "both" if self.run is not None else "neither"
            problems.append(f"exactly one of --run and --model must be set, got {given}")
        if self.adapter is not None and self.run is not None:
            problems.append(f"--adapter goes with --model, not --run (got --adapter={self.adapter!r})")
        if self.dtype not in DTYPES:
            problems.append(f"--dtype must be one of {list(DTYPES)}, got {self.dtype!r}")
        for flag, value in (("--run", self.run), ("--adapter", self.adapter)):
            if value is not None and not Path(value).expanduser().exists():
                problems.append(f"{flag} {value!r}: no such file or folder")
        if self.adapter is not None and Path(self.adapter).expanduser().is_dir():
            if not (Path(self.adapter).expanduser() / ADAPTER_CONFIG).is_file():
                problems.append(f"--adapter {self.adapter!r}: not a PEFT adapter folder (no {ADAPTER_CONFIG})")
        if problems:
            raise ValueError("; ".join(problems))
