"""One check for every named state a run reads from a file: a checkpoint's ``state_dict`` and
``federation.global_state``, an adapter's weights, a selector's, a client's state file.

Each is a mapping of names to tensors that the run will copy into its own parameters. What
the run expects is a mapping of the same names to its parameters (or their shapes); the file's
state must hold tensors (not strings, not lists), each named as one of the run's, of its shape
and dtype, finite, and, where the run needs every one of them (the global state drives the
federation; an adapter replaces every LoRA weight), none may be missing: a missing tensor would
silently stay at its random start. :func:`state_problems` lists what is wrong,
:func:`check_state` raises the first as one line naming the option, the file and the key.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import torch

from lightning_fed.errors import CheckpointError

ANY_FLOAT = "floating"
"""``dtypes=ANY_FLOAT``: any floating-point dtype fits (the tensor is cast when copied in)."""


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``float32``."""
    return str(dtype).removeprefix("torch.")


def tensor_problem(
    key: str, value: Any, shape: tuple[int, ...] | None, dtype: torch.dtype | str | None = ANY_FLOAT
) -> str | None:
    """What is wrong with one tensor of a state, or ``None``.

    Args:
        key: Its name, for the message.
        value: What the file holds under it.
        shape: The shape it must have (``None``: any).
        dtype: The dtype it must have, :data:`ANY_FLOAT` for any floating point, ``None`` for any.
    """
    if not isinstance(value, torch.Tensor):
        return f"{key!r} is a {type(value).__name__}, expected a tensor"
    if dtype == ANY_FLOAT and not value.is_floating_point():
        return f"{key!r} is {dtype_name(value.dtype)}, expected floating point weights"
    if shape is not None and tuple(value.shape) != tuple(shape):
        return f"{key!r} has shape {tuple(value.shape)}, the model's is {tuple(shape)}"
    if isinstance(dtype, torch.dtype) and value.dtype != dtype:
        return f"{key!r} is {dtype_name(value.dtype)}, the model's is {dtype_name(dtype)}"
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        return f"{key!r} has NaN or infinite values"
    return None


def state_problems(
    state: Any,
    expected: Mapping[str, Any],
    required: Collection[str] | None = None,
    exact_dtype: bool = False,
    unknown: str = "parameter of this model",
    one_dtype: bool = False,
) -> list[str]:
    """Everything wrong with ``state`` against ``expected``, first problem first (empty if it fits).

    Args:
        state: What the file holds (a mapping of names to tensors, if it is what it should be).
        expected: The run's tensors (or anything with ``shape`` and ``dtype``) by the same names.
        required: The names ``state`` must hold (default: every name of ``expected``; empty: none).
        exact_dtype: Each tensor must have the dtype of the run's (else any floating point where
            the run's is floating point).
        unknown: What a name of ``state`` must be, for the message ("parameter of this model").
        one_dtype: Every tensor must have the dtype of the first (an adapter file is written from
            parameters of one dtype, whichever the run trained in: one tensor of another dtype
            is not what the run wrote).
    """
    if not isinstance(state, Mapping):
        return [f"is a {type(state).__name__}, expected a mapping of names to tensors"]
    problems = []
    first = next((v.dtype for v in state.values() if isinstance(v, torch.Tensor)), None)
    for key, value in state.items():
        if not isinstance(key, str) or key not in expected:
            problems.append(f"{key!r} is not a {unknown}")
            continue
        ref = expected[key]
        floating = ref.dtype.is_floating_point and not exact_dtype  # a non-float tensor keeps its dtype
        problem = tensor_problem(key, value, tuple(ref.shape), ANY_FLOAT if floating else ref.dtype)
        if problem:
            problems.append(problem)
        elif one_dtype and value.dtype != first:
            problems.append(f"{key!r} is {dtype_name(value.dtype)}, the other weights are {dtype_name(first)}")
    missing = [k for k in (expected if required is None else required) if k not in state]
    if missing:
        problems.append(f"{missing[0]!r} is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    return problems


def check_state(
    state: Any,
    expected: Mapping[str, Any],
    where: str,
    required: Collection[str] | None = None,
    exact_dtype: bool = False,
    unknown: str = "parameter of this model",
    hint: str = "",
    one_dtype: bool = False,
) -> None:
    """:func:`state_problems`, raised.

    Args:
        where: What names the state in the message: ``"ckpt_path '<file>': federation.global_state"``.
        hint: What to do, appended after ``;``.

    Raises:
        CheckpointError: ``"<where> <first problem> (and N more problems)[; <hint>]"``, one line.
    """
    problems = state_problems(state, expected, required, exact_dtype, unknown, one_dtype)
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise CheckpointError(f"{where} {problems[0]}{more}" + (f"; {hint}" if hint else ""))


def named(field: str, path: str | Path, section: str = "") -> str:
    """``"ckpt_path '/runs/x/last.ckpt': federation.global_state"``: the ``where`` of :func:`check_state`."""
    return f"{field} {str(path)!r}:" + (f" {section}" if section else "")
