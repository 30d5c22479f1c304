"""What tokenizing cut or left out, per set and client: the data part of ``summary.json``.

:class:`~lightning_fed.datamodules.FederatedDataModule` encodes each client's rows once, at
setup; the tokenizers (:mod:`~lightning_fed.datamodules.tokenize`) report through two callbacks
that the current example was cut (``on_truncate``) or kept under half its prompt
(``on_prompt_loss``), and the data module counts an example dropped for its length itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn

KINDS = ("truncated", "dropped", "prompt_lost", "prompt_dropped")
"""``truncated``: cut to fit; ``dropped``: too long with ``on_overflow: drop``; ``prompt_lost``:
truncated and kept under half its prompt; ``prompt_dropped``: fewer than ``min_prompt_length``
prompt tokens would fit."""


class EncodingCounts:
    """Examples truncated and dropped, per set (``train``, ``val``, ``test``) and client.

    Attributes:
        counts: Kind (:data:`KINDS`) -> set -> one count per client.
    """

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, list[int]]] = {kind: {} for kind in KINDS}
        self._cut = self._lost = False  # flags of the example being encoded
        self._private = False  # the warnings of a private run give totals only

    def start(self, name: str, num_clients: int) -> None:
        """Count the set ``name`` from zero."""
        for per_set in self.counts.values():
            per_set[name] = [0] * num_clients

    def begin_example(self) -> None:
        """The next example is encoded: nothing cut yet."""
        self._cut = self._lost = False

    def note_truncation(self) -> None:
        """``on_truncate`` callback of the tokenizers: the current example was cut."""
        self._cut = True

    def note_prompt_loss(self) -> None:
        """``on_prompt_loss`` callback of the tokenizers: the current example kept < half its prompt."""
        self._lost = True

    def kept(self, name: str, client_id: int) -> None:
        """The current example of ``client_id`` in set ``name`` was kept (perhaps cut)."""
        self.counts["truncated"][name][client_id] += self._cut
        self.counts["prompt_lost"][name][client_id] += self._lost

    def left_out(self, kind: str, name: str, client_id: int) -> None:
        """The current example was left out: ``kind`` is ``dropped`` or ``prompt_dropped``."""
        self.counts[kind][name][client_id] += 1

    def warn(self, max_length: int, truncation: str, min_prompt_length: int, private: bool = False) -> None:
        """One warning per set and kind that counted anything, naming the setting to change; in a
        ``private`` run (differential privacy) with the total only, never a figure per client."""
        self._private = private
        fit = f"data.max_length={max_length}"
        raise_it = "set data.max_completion_length or raise data.max_length"
        self._warn_sets(
            "truncated", lambda n, what: f"{n} {what} examples truncated to fit {fit} (data.truncation={truncation!r})"
        )
        self._warn_sets(
            "dropped", lambda n, what: f"{n} {what} examples dropped to fit {fit} (data.on_overflow='drop')"
        )
        self._warn_sets(
            "prompt_dropped",
            lambda n, what: (
                f"{n} {what} examples dropped: fewer than data.min_prompt_length={min_prompt_length}"
                f" of their prompt tokens fit {fit} ({raise_it})"
            ),
        )
        self._warn_sets(
            "prompt_lost",
            lambda n, what: (
                f"{n} of {sum(self.counts['truncated'][what])} truncated {what} examples lost most of"
                f" their prompt (kept under half its tokens; {raise_it})"
            ),
        )

    def left_none(self, name: str, max_length: int, min_prompt_length: int) -> str | None:
        """Why the set ``name`` (``val``, ``test``) kept no example: the rows it left out, by cause; ``None``
        if it left none out."""
        fit = f"data.max_length={max_length}"
        causes = {
            "dropped": f"dropped to fit {fit} (data.on_overflow='drop')",
            "prompt_dropped": (
                f"dropped: fewer than data.min_prompt_length={min_prompt_length} of their prompt tokens fit {fit}"
                " (set data.max_completion_length or raise data.max_length)"
            ),
        }
        said = [f"{n} {cause}" for kind, cause in causes.items() if (n := sum(self.counts[kind].get(name, ())))]
        return f"all {'; '.join(said)}" if said else None

    def _warn_sets(self, kind: str, message: Callable[[int, str], str]) -> None:
        """One warning per set that counted anything under ``kind``: ``message(total, set)``, then
        the per-client counts."""
        for what, per_client in self.counts[kind].items():
            if sum(per_client):
                each = "" if self._private else f"; per client: {per_client}"  # private: totals only
                rank_zero_warn(f"data: {message(sum(per_client), what)}{each}")

    def report(self) -> dict[str, Any]:
        """Kind -> set -> per-client counts (the ``data`` section of ``summary.json``)."""
        return dict(self.counts)
