"""The train-round protocol: what the Flower server's one outer loop asks of a path.

:meth:`FederatedServer.start <lightning_fed.deploy.server.FederatedServer.start>` runs every
round the same way: the round's path (:class:`TrainRound`, picked once by
:func:`~lightning_fed.deploy.train_rounds.choose_train_round`) runs the train round, from the
choice of its clients to :meth:`ServerRound.close <lightning_fed.federation.ServerRound.close>`;
then the outer loop records the round's counts, evaluates per ``federation.eval_every``, stops
when the privacy budget says so, and writes the run's record. What a path decides is only how a
round's train messages go out and how its replies come back: which clients are sent what, when
the round stops waiting, and which replies go to the server round (``ServerRound.receive``,
``fail``, ``reject``). Admission, aggregation, the hooks, privacy accounting and the report are
the :class:`~lightning_fed.federation.ServerRound`'s, the same object in both transports, so a
new path needs no edit there, in ``privacy/`` or in the outer loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from flwr.app import ArrayRecord, ConfigRecord, Message
    from flwr.serverapp import Grid

    from lightning_fed.deploy.records import ReplyLimits
    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.hooks import RoundHook
    from lightning_fed.federation.server_round import ServerRound
    from lightning_fed.state import StateDict


class RoundServer(Protocol):
    """What a path uses of :class:`lightning_fed.deploy.server.FederatedServer` (a Protocol:
    ``server.py`` imports the paths, so they do not import it)."""

    server: ServerRound
    context: RoundContext
    module: Any
    nodes: dict[int, int]
    limits: ReplyLimits
    late: list[int]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]: ...

    def aggregate_train(self, server_round: int, replies: Iterable[Message], silent_are_late: bool = False) -> Any: ...


class TrainRound(ABC):
    """One way of running a Flower train round, behind the outer loop of
    :class:`~lightning_fed.deploy.server.FederatedServer`.

    Args:
        fed: The Flower server (:class:`RoundServer`: its ``server`` round, ``nodes``,
            ``context``, ``module``, reply ``limits`` and the synchronous exchange
            ``configure_train`` / ``aggregate_train``).
        grid: Flower's grid.
        timeout: Seconds a client may take to answer.
        hook: The round hook that asked for this path (its ``server_path()``), if one did.
    """

    #: How a run asks for this path, as a refusal names it (e.g. ``"SystemHeterogeneity.clock='wall'"``).
    asked_by = ""
    #: What to use instead where the path cannot run (the end of a refusal).
    instead = ""

    def __init__(self, fed: RoundServer, grid: Grid, timeout: float, hook: RoundHook | None = None) -> None:
        self.fed, self.server, self.grid, self.timeout, self.hook = fed, fed.server, grid, timeout, hook

    def begin(self) -> None:
        """Once the nodes are known (``fed.nodes``), before the first round: one-line
        ``ValueError`` for settings this path cannot run with, before any train message is sent."""

    @abstractmethod
    def run(self, round_idx: int) -> None:
        """Round ``round_idx`` (0-based), closed through ``ServerRound.close``."""

    def evaluation_model(self, client_id: int) -> StateDict:
        """The model ``client_id`` evaluates after a round: what the strategy would send it."""
        return self.server.client_start(client_id)[0]

    def end(self) -> None:
        """After the last round, before the run's record is written."""
