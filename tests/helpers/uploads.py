"""A round hook that records what clients upload (in this process, either transport)."""

from __future__ import annotations

from typing import Any

from lightning_fed.federation.hooks import RoundHook

#: ``(client, num_examples, metrics)`` of every upload since the last ``clear()``.
SEEN: list[tuple[int, int, dict[str, Any]]] = []

#: Each of those turns' mean training loss, as the client computed it (sent or not).
LOSSES: list[float] = []


class RecordUploads(RoundHook):
    """Appends each client's upload to :data:`SEEN` (its client half: runs where the client trains)."""

    def on_client_end(self, turn: Any, trainer: Any, module: Any, update: Any) -> None:
        SEEN.append((update.client_id, update.num_examples, dict(update.metrics)))
        LOSSES.append(sum(turn.losses) / len(turn.losses))
