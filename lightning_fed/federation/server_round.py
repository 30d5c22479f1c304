"""The server's half of a round, shared by the in-process loop and the Flower server.

:class:`ServerRound` holds what a round needs on the server side (strategy, hooks, global
state, report, fault counters, update screen) and the steps both transports take: what a
client is sent (:meth:`~ServerRound.client_start`), whether its update is admitted
(:meth:`~ServerRound.admit`: checks, norm, screening), and the advance to the next global
state (:meth:`~ServerRound.advance`: ``min_clients``, aggregation, after-aggregate hooks).
:class:`~lightning_fed.callbacks.FederatedLoop` and
:class:`~lightning_fed.deploy.FederatedServer` run exactly these, so a round means the same
thing in a simulation and in a deployment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_fed.federation.screening import UpdateScreen, update_norm
from lightning_fed.state import StateDict, clone_state
from lightning_fed.strategies.base import ClientUpdate, Strategy, check_update

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.callbacks.reporting import RoundReport
    from lightning_fed.federation.hooks import RoundHook


class ServerRound:
    """Mixin of the round's server steps; the owner sets the attributes below in its ``__init__``."""

    strategy: Strategy
    hooks: list[RoundHook]
    global_state: StateDict
    report: RoundReport
    screen: UpdateScreen
    min_clients: int
    failed_clients: int
    rejected_updates: int
    clipped_updates: int
    _extra_bytes: list[int]

    def add_round_bytes(self, up: int = 0, down: int = 0) -> None:
        """Count extra traffic of the current round (e.g. a hook's broadcast or uploads).

        Callable from any hook, ``on_round_start`` included; it lands in this round's
        ``comm/up_bytes``/``comm/down_bytes`` and summary record.
        """
        self._extra_bytes[0] += int(up)
        self._extra_bytes[1] += int(down)

    def client_start(self, client_id: int) -> tuple[StateDict, StateDict]:
        """What the server sends ``client_id`` this round: its start state and the downlink extras.

        A remote client (:class:`~lightning_fed.deploy.ClientLoop`) returns what it received.
        """
        return self.strategy.client_model(client_id, self.global_state), self.strategy.downlink(client_id)

    def admit(self, received: StateDict, update: ClientUpdate) -> ClientUpdate:
        """The update as it will be aggregated: checked against what the client received, its
        change's norm recorded (``client_k/update_norm``), then screened (maybe clipped).

        Raises :class:`~lightning_fed.strategies.AggregationError` to reject it.
        """
        check_update(received, update)
        update.metrics["update_norm"] = update_norm(received, update.state)
        update, clipped = self.screen(received, update)
        self.clipped_updates += clipped
        return update

    def advance(
        self,
        trainer: Any,
        module: pl.LightningModule,
        round_idx: int,
        valid: list[ClientUpdate],
        sampled: int,
        failed: list[int],
        rejected: dict[int, str],
    ) -> None:
        """Aggregate the round's valid updates into the next global state, load it into the
        module and run the after-aggregate hooks; fail below ``min_clients``."""
        if len(valid) < self.min_clients:
            raise RuntimeError(
                f"round {round_idx + 1}: only {len(valid)} of {sampled} clients returned a valid update,"
                f" fewer than federation.min_clients={self.min_clients} (failed: {sorted(failed)}, rejected: {sorted(rejected)})"
            )
        self.global_state = clone_state(self.strategy.aggregate(self.global_state, valid))
        module.load_state(self.global_state)
        for hook in self.hooks:
            hook.after_aggregate(self, trainer, module, round_idx)

    def take_extra_bytes(self) -> tuple[int, int]:
        """The (up, down) bytes hooks added this round (:meth:`add_round_bytes`); resets them."""
        extra, self._extra_bytes = self._extra_bytes, [0, 0]
        return extra[0], extra[1]

    def hook_summaries(self) -> dict[str, Any]:
        """Each hook's :meth:`~RoundHook.summary`, keyed by its class name (empty ones left out)."""
        return {type(h).__name__: out for h in self.hooks if (out := h.summary())}

    def fault_counts(self) -> dict[str, int]:
        """Clients that failed, updates rejected and updates clipped so far (for summary.json)."""
        return {
            "failed_clients": self.failed_clients,
            "rejected_updates": self.rejected_updates,
            "clipped_updates": self.clipped_updates,
        }
