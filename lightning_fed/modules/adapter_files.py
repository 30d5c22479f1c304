"""PEFT adapter folders and adapter weights handed over by a user, checked before a model is built.

A LoRA folder is ``adapter_config.json`` + ``adapter_model.safetensors``. What PEFT would do with
a bad one: allocate ``r`` rows per target layer as the config says (``r: 100000000`` fails in
the allocator, naming nothing), fail on a shape mid-load, or load NaN weights and go on. Here
the config's ``r`` must be a positive integer that the weights' own shapes agree with (so what
is allocated is bounded by the file's size), the file must be a complete safetensors file, and
every tensor must be finite floating point. Each problem is one line naming the option, the
file and the key.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import torch

from lightning_fed.adapter_config import ADAPTER_CONFIG, read_adapter_config
from lightning_fed.errors import CheckpointError
from lightning_fed.federation.state_check import check_state, named, tensor_problem

ADAPTER_WEIGHTS = "adapter_model.safetensors"


def check_adapter_folder(folder: str | Path, field: str) -> dict[str, Any]:
    """The folder's adapter config, after checking it and its weights (see the module docstring).

    Args:
        folder: The PEFT adapter folder.
        field: The option that named it (``--adapter``, ``--run``, ``selector.path``).

    Raises:
        ValueError: One line naming ``field``, the file and what is wrong.
    """
    folder = Path(folder)
    config = read_adapter_config(folder, field)  # r and lora_alpha, torch-free (lightning_fed/adapter_config.py)
    r, weights_path = config["r"], folder / ADAPTER_WEIGHTS
    weights = read_adapter_weights(weights_path, field)
    ranks = config.get("rank_pattern") or {}
    for key, value in weights.items():
        if ranks or "lora_" not in key or value.dim() != 2:
            continue
        rank = value.shape[0] if ".lora_A." in key else value.shape[1] if ".lora_B." in key else r
        if rank != r:
            raise ValueError(
                f"{field} {str(weights_path)!r}: {key!r} has shape {tuple(value.shape)}, which is not rank r={r}"
                f" of {ADAPTER_CONFIG}"
            )
    return config


def read_adapter_weights(path: str | Path, field: str) -> dict[str, torch.Tensor]:
    """The tensors of an adapter's safetensors file, each finite floating point.

    Raises:
        ValueError: One line naming ``field`` and the file (missing, truncated, or a bad tensor).
    """
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{field} {str(path)!r}: no such file (a LoRA adapter folder holds {ADAPTER_WEIGHTS})")
    try:
        weights = load_file(str(path))
    except Exception as err:  # noqa: BLE001 - SafetensorError, OSError, a header that is not JSON...
        first = " ".join(str(err).split())[:200]
        raise ValueError(f"{field} {str(path)!r}: not a complete safetensors file ({first})") from None
    check_finite(weights, field, path)
    return weights


def check_finite(state: Mapping[str, Any], field: str, path: str | Path) -> None:
    """Every tensor of ``state`` is floating point and finite.

    Raises:
        ValueError: naming ``field``, ``path`` and the first bad key.
    """
    for key, value in state.items():
        if problem := tensor_problem(key, value, None):
            raise CheckpointError(f"{named(field, path)} {problem}")


def check_shapes(
    state: Mapping[str, torch.Tensor],
    expected: Mapping[str, Any],
    field: str,
    path: str | Path,
    required: Collection[str] | None = None,
) -> None:
    """``state`` is exactly an adapter of the model: every tensor names a tensor of ``expected``
    (parameters, or PEFT's state dict) and has its shape, finite floating point, all of one dtype, and none of
    ``required`` (default: every tensor of ``expected``) is missing: PEFT only warns about a
    missing one and leaves it at its random start (:func:`~lightning_fed.federation.state_check.check_state`).

    Raises:
        ValueError: naming ``field``, ``path`` and the first unknown, missing or bad key.
    """
    check_state(
        state, expected, named(field, path), required=required, unknown="weight of this model's adapter", one_dtype=True
    )
