"""What ``HeldOutRouge``'s ``where`` needs of its held-out set, said before torch.

``where`` keeps the rows of the hook's ``dataset`` whose columns (renamed by its ``field_map``) equal
the given values (:func:`~lightning_fed.evaluation.heldout.held_out_examples`). A column the set does
not have, or a filter no row passes, was refused after the imports and a trained round (a ``version_0``
folder written), exit 1, in a line naming no option: ``error: `where`: '/d/held.jsonl' has no column
'topic' (...)``. Here, for a local file whose columns (and, for JSON and JSON Lines, text values) are
certain, the line names ``federation.hooks[i].where`` and ``federation.hooks[i].dataset``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.data_cross_rules import field_mapped, json_rows, local_columns
from lightning_fed.read_errors import file_errors


def where_problem(index: int, init_args: Mapping[str, Any]) -> str | None:
    """The line refusing ``federation.hooks[index]`` (a ``HeldOutRouge``) whose ``where`` names a column
    its local ``dataset`` lacks, or keeps none of its rows; ``None`` where that is not certain here."""
    where, dataset, field_map = init_args.get("where"), init_args.get("dataset"), init_args.get("field_map")
    if not isinstance(where, Mapping) or not where or not isinstance(dataset, str):
        return None
    columns = local_columns(dataset)
    renamed = field_mapped(columns, field_map) if columns is not None else None
    if renamed is None:
        return None
    hook = f"federation.hooks[{index}]"
    for column in where:
        if column not in renamed:
            shown = ", ".join(renamed)
            return f"{hook}.where: {hook}.dataset {dataset!r} has no column {column!r} (columns: {shown})"
    if _matches(dataset, where, field_map or {}) == 0:
        return f"{hook}.where: no row of {hook}.dataset {dataset!r} matches where={dict(where)}"
    return None


def _matches(dataset: str, where: Mapping[str, Any], field_map: Mapping[str, str]) -> int | None:
    """How many rows of the JSON or JSON Lines file ``dataset`` ``where`` keeps, where every value compared
    is text or null (as ``datasets`` reads such a column); ``None`` otherwise (another format, numbers...)."""
    try:
        rows = json_rows(Path(dataset).expanduser())
    except file_errors():  # not read cleanly: the data source's reader says it
        return None
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        return None
    sources = {column: field_map.get(column, column) for column in where}
    values = [row.get(source) for row in rows for source in sources.values()]
    if not all(isinstance(v, str) for v in where.values()) or not all(v is None or isinstance(v, str) for v in values):
        return None
    return sum(all(row.get(sources[column]) == value for column, value in where.items()) for row in rows)
