"""JSON Lines read with line numbers: the one loop behind every ``.jsonl`` reader that names a bad line."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any


def numbered_records(lines: Iterable[str], not_json: Callable[[int], Exception]) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line (numbers from 1, blank lines counted).

    Raises:
        Exception: ``not_json(number)`` for the first line that is not JSON (its own cause hidden:
            the caller's message names the file and the line).
    """
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            raise not_json(number) from None
        yield number, value
