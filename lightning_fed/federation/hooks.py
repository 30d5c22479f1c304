"""Round-level hooks: method-specific work that is neither a local objective nor aggregation.

FedHDS data selection runs before a round, FedBiOT's emulator alignment after aggregation,
FedBiscuit's regrouping before a round. Each is a :class:`RoundHook` given to the
:class:`~lightning_fed.callbacks.FederatedLoop`, never an ``if`` inside the loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.callbacks.federated_loop import FederatedLoop
    from lightning_fed.strategies.base import ClientUpdate


class RoundHook:
    """Does nothing by default; override the moments you need.

    Hooks run on the server (``on_round_start``, ``after_aggregate``) or on the client
    (``on_client_start``, ``on_client_end``); keep that split so the same hook works in a
    Flower deployment. Anything a hook must remember across a resume goes in
    :meth:`state_dict` (tensors allowed).
    """

    def setup(self, loop: FederatedLoop, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        """Once per fit, after a resumed run's state is loaded, before any evaluation or round.

        Put state restored by :meth:`load_state_dict` back into the module here.
        """

    def on_round_start(
        self, loop: FederatedLoop, trainer: pl.Trainer, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> None:
        """Before the round's data is laid out.

        May change the sampled clients' data (``ClientData.select``) or remove clients from
        this round by editing ``clients`` in place (the round trains the list as it is left).
        """

    def on_client_start(
        self, loop: FederatedLoop, trainer: pl.Trainer, module: pl.LightningModule, client_id: int
    ) -> None:
        """After the client's state is loaded, before its first local step."""

    def on_client_end(
        self, loop: FederatedLoop, trainer: pl.Trainer, module: pl.LightningModule, update: ClientUpdate
    ) -> None:
        """After the client's last local step; ``update`` is what it uploads."""

    def after_aggregate(
        self, loop: FederatedLoop, trainer: pl.Trainer, module: pl.LightningModule, round_idx: int
    ) -> None:
        """After the new global state is loaded into the module, before evaluation."""

    def summary(self) -> dict[str, Any]:
        """What this hook adds to ``summary.json`` (under ``hooks.<ClassName>``); JSON-serialisable."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
