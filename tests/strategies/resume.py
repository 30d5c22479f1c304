"""A server optimizer stopped and resumed through its ``state_dict`` (saved as a checkpoint saves it)."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import torch


def resumed(make: Callable[[], Any], rounds: Sequence[list], x0: dict) -> tuple[Any, Any, dict]:
    """``(a, b, x)``: ``a`` = ``make()`` after every round but the last, ``b`` a fresh ``make()``
    loaded from ``a``'s ``state_dict`` through ``torch.save``/``weights_only`` load, and ``x`` the
    global state before the last round."""
    a, x = make(), x0
    for updates in rounds[:-1]:
        x = a.aggregate(x, updates)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    b = make()
    b.load_state_dict(torch.load(buffer, weights_only=True))
    return a, b, x
