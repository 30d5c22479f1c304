"""Each client's rows encoded to fit ``data.max_length``: the length budget's checks, and the
loop that tokenizes every row, drops or refuses what does not fit and counts it per set and
client (:class:`~lightning_fed.datamodules.encoding_counts.EncodingCounts`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lightning_fed.data_cross_rules import row_line
from lightning_fed.datamodules.encoding_counts import EncodingCounts
from lightning_fed.datamodules.tokenize import Overflow, PromptTooShort
from lightning_fed.errors import UserError


def encode_clients(
    rows: Sequence[Mapping[str, Any]],
    parts: list[list[int]],
    encode: Callable[[Mapping[str, Any]], dict[str, list[int]]],
    counts: EncodingCounts,
    name: str,
    source: str,
    on_overflow: str,
    groups: list[int] | None = None,
) -> list[list[dict[str, Any]]]:
    """Each client's rows (``parts[c]``: indices into ``rows``) through ``encode``, tagged with
    ``client_id`` (and ``group_id`` from ``groups``); what was cut or left out is counted in
    ``counts`` under the set ``name``.

    Raises:
        UserError: A row too long for ``data.max_length`` under ``on_overflow="error"``, in one
            line naming both options, the set's option and file ``source``, the row (its line in a
            JSON Lines file) and the client.
    """
    option = "data.dataset" if name == "train" else f"data.{name}_dataset"
    counts.start(name, len(parts))
    out = []
    for cid, indices in enumerate(parts):
        encoded = []
        for i in indices:
            counts.begin_example()
            try:
                item = encode(rows[i])
            except PromptTooShort:
                counts.left_out("prompt_dropped", name, cid)
                continue
            except Overflow as err:
                if on_overflow == "drop":
                    counts.left_out("dropped", name, cid)
                    continue
                line = row_line(source, i)
                row = f"row {i}" + (f" (line {line})" if line is not None else "")
                raise UserError(
                    f"data.max_length: {row} of {option} {source!r} (client {cid}) has {err} with"
                    " data.on_overflow='error'; raise data.max_length or set data.on_overflow to truncate or drop"
                ) from None
            counts.kept(name, cid)
            item = {**item, "client_id": cid}
            if groups is not None:
                item["group_id"] = groups[i]
            encoded.append(item)
        out.append(encoded)
    return out
