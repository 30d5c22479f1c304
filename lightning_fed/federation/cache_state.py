"""What a DPO reference cache's state in a checkpoint must be (``ReferenceCache.state_dict``).

Kept apart from the cache itself (which imports the modules package) so that the checkpoint
checker reads it with torch alone imported (:mod:`~lightning_fed.federation.early_check`).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

KEY_BYTES = 16
"""Bytes of one example's key (a 128-bit BLAKE2b digest)."""
SERVED_DTYPES = frozenset({"", "float16", "bfloat16", "float32", "float64"})
"""Dtypes a restored cache may serve its values in (``""``: nothing was computed yet)."""


def cache_state_problem(state: object) -> str | None:
    """What is wrong with a :meth:`ReferenceCache.state_dict` read from a checkpoint, or ``None``."""
    if not isinstance(state, Mapping):
        return f"reference_cache must be a mapping, got {_describe(state)}"
    keys, values, dtype = state.get("keys"), state.get("values"), state.get("dtype")
    if not (isinstance(keys, Tensor) and keys.dtype == torch.uint8 and keys.dim() == 2 and keys.shape[1] == KEY_BYTES):
        return f"reference_cache.keys must be a uint8 tensor of shape (N, {KEY_BYTES}), got {_describe(keys)}"
    if not (isinstance(values, Tensor) and values.dtype == torch.float64 and values.shape == (len(keys), 2)):
        return f"reference_cache.values must be a float64 tensor of shape ({len(keys)}, 2), got {_describe(values)}"
    if not bool(torch.isfinite(values).all()):  # found from outside: a NaN was served as a reference log-prob
        return "reference_cache.values has NaN or infinite values"
    if not isinstance(dtype, str) or dtype not in SERVED_DTYPES:
        return f"reference_cache.dtype must be one of {sorted(SERVED_DTYPES)}, got {dtype!r}"
    return None


def _describe(value: object) -> str:
    if isinstance(value, Tensor):
        return f"{str(value.dtype)[6:]} of shape {tuple(value.shape)}"
    return type(value).__name__
