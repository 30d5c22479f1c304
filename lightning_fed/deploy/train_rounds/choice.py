"""Which train round a run takes over Flower, and the one place that refuses what cannot run.

:func:`choose_train_round` reads the run once, when :meth:`FederatedServer.start
<lightning_fed.deploy.server.FederatedServer.start>` begins and before anything is sent or
written: a round hook asks for a path by its ``server_path()`` (:data:`HOOK_PATHS`); a
:class:`~lightning_fed.deploy.secure_aggregation.SecureAggregation` strategy takes the SecAgg+
round; any other run the plain one. A new path is a :class:`TrainRound` in this folder and one
entry of :data:`HOOK_PATHS` (the name its hook's ``server_path()`` returns); the outer loop,
``privacy/`` and the hooks' other moments stay as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lightning_fed.deploy.secure_aggregation import SecureAggregation
from lightning_fed.deploy.train_rounds.buffered import BufferedRound
from lightning_fed.deploy.train_rounds.plain import PlainRound
from lightning_fed.deploy.train_rounds.protocol import TrainRound
from lightning_fed.deploy.train_rounds.secure import SecureRound
from lightning_fed.deploy.train_rounds.wall_clock import WallClockRound
from lightning_fed.federation.hooks import reads_client_data
from lightning_fed.pipelines import flower_refusals

if TYPE_CHECKING:
    from flwr.serverapp import Grid

    from lightning_fed.deploy.train_rounds.protocol import RoundServer

#: The paths a round hook may ask for, by the name its ``server_path()`` returns.
HOOK_PATHS: dict[str, type[TrainRound]] = {"buffered": BufferedRound, "wall_clock": WallClockRound}


def choose_train_round(fed: RoundServer, grid: Grid, timeout: float) -> TrainRound:
    """The run's train round; a one-line ``ValueError`` for a run the Flower server cannot run:

    - a hook that reads the clients' data on the server (it implements ``on_client_data``);
    - a data module whose stage is the server's own training (``pipelines.flower_refusals``);
    - two hooks asking for a train-round path each, or a path no :data:`HOOK_PATHS` entry names;
    - a hook's path with secure aggregation (Flower's SecAgg+ workflow runs its own rounds).
    """
    server = fed.server
    local = [type(h).__name__ for h in server.hooks if reads_client_data(h)]
    if local:
        raise ValueError(
            f"federation.hooks: {local[0]} cannot run under Flower: it reads client data on the server"
            " (it implements on_client_data; the Flower server holds no client data)"
        )
    if refused := flower_refusals(server.datamodule):  # e.g. FedBis RLFT: the server's own training
        raise ValueError(refused[0])
    asked = [(h, h.server_path()) for h in server.hooks if h.server_path() is not None]
    for hook, path in asked:
        if path not in HOOK_PATHS:
            raise ValueError(
                f"federation.hooks: {type(hook).__name__} asks for the train round {path!r};"
                f" the Flower server has {sorted(HOOK_PATHS)}"
            )
    if len(asked) > 1:
        paths = " and ".join(HOOK_PATHS[path].asked_by for _, path in asked)
        raise ValueError(f"federation.hooks: {paths} each ask for their own train round; a run has one")
    secure = isinstance(server.strategy, SecureAggregation)
    if not asked:
        return (SecureRound if secure else PlainRound)(fed, grid, timeout)
    (hook, path), kind = asked[0], HOOK_PATHS[asked[0][1]]
    if secure:
        raise ValueError(
            f"federation.hooks: {kind.asked_by} cannot run with SecureAggregation"
            f" (Flower's SecAgg+ workflow runs its own rounds and time-outs); {kind.instead}"
        )
    return kind(fed, grid, timeout, hook)
