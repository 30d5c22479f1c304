"""Round-level hooks: method-specific work that is neither a local objective nor aggregation.

FedHDS data selection runs before a round, FedBiOT's emulator alignment after aggregation,
FedBiscuit's regrouping before a round. Each is a :class:`RoundHook` given to the
federation (``federation.hooks``), never an ``if`` inside the engine.

A hook has two halves. The server half (:meth:`RoundHook.setup_server`, ``client_queries``,
``on_replies``, ``on_round_start``, ``client_instruction``, ``after_aggregate``) gets the
:class:`~lightning_fed.federation.server_round.ServerRound` and a
:class:`~lightning_fed.federation.context.RoundContext` (never a Trainer); the client half
(:meth:`RoundHook.setup_client`, ``answer_query``, ``prepare_client``, ``on_client_start``,
``on_client_end``) gets the client's module, data and turn. Everything a client needs reaches
it through a query or its ``client_instruction``, so it runs in-process and under Flower alike.
Once, when the server is bound to its clients (before anything is written): ``check_server``;
then once per fit ``setup_server`` / ``setup_client``. Order per round, in both transports::

    sample -> [each hook] client_queries -> answer_query (clients) -> on_replies
    -> [each hook] on_round_start -> [in process only] on_client_data
    -> per client: client_instruction (server) -> prepare_client (client) -> lay out batches
       -> on_client_start -> local steps -> on_client_end
    -> admit -> aggregate -> after_aggregate
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.report import RoundReport
    from lightning_fed.state import StateDict
    from lightning_fed.strategies.base import ClientUpdate, Strategy

Payload = dict[str, Any]
"""What a query, a reply or an instruction carries: ``torch.Tensor`` (any dtype), ``int``,
``float``, ``str``, ``bool``, ``list[int]``, ``list[float]``."""

WITH_GLOBAL_STATE = "with_global_state"
"""A query payload key: ``True`` sends ``server.global_state`` along, loaded into the client's
module before :meth:`RoundHook.answer_query` (counted in the round's downlink bytes)."""


class ServerRound(Protocol):
    """What a server-side moment gets as ``server``: the
    :class:`lightning_fed.federation.server_round.ServerRound` (named here, not imported, so the
    contract depends on nothing of the engine)."""

    strategy: Strategy
    hooks: list[RoundHook]
    global_state: StateDict
    seed: int
    rounds: int
    min_clients: int
    num_clients: int
    report: RoundReport
    datamodule: Any  # in-process the run's FederatedDataModule; under Flower the config's, not set up
    module: Any  # the run's module, set when the run is bound (``None`` before)
    engine: str

    def add_round_bytes(self, up: int = 0, down: int = 0) -> None: ...


@dataclass
class Replies:
    """What :meth:`RoundHook.on_replies` gets: one round's answers to one hook's queries."""

    round_idx: int
    """The round (0-based)."""

    clients: list[int]
    """The round's clients, the list the round trains: edit it in place to leave clients out."""

    answers: dict[int, Payload]
    """Each asked client's :meth:`RoundHook.answer_query` reply, by client id."""


class ClientTurn(Protocol):
    """What a client-side moment gets as ``turn``: the :class:`lightning_fed.federation.turn.ClientTurn`."""

    client_id: int
    round_idx: int
    rounds: int
    seed: int
    strategy: Strategy
    received: StateDict
    downlink: StateDict
    steps: int
    failed: bool


class Capability(str, Enum):
    """What a round hook declares it does beyond the contract every hook keeps (its
    :attr:`RoundHook.capabilities`). Generic code (the loop, the Flower server, batching) reads
    the declaration; it never infers one from which methods a class overrides."""

    READS_CLIENT_DATA = "reads_client_data"
    """The server reads the clients' data itself (:meth:`RoundHook.on_client_data`): in one process
    only; a Flower run refuses the hook. Only a hook declaring it is given the data."""

    BATCH_SAFE = "batch_safe"
    """It may run with clients trained together (``federation.batch_clients``): its per-client
    moments (``prepare_client``, ``on_client_start``/``on_client_end``) hold when several turns
    share one step, each turn still getting its own calls. Undeclared, the run trains its clients
    one after another (said at start): the safe default for a hook whose author has not checked."""


class RoundHook:
    """Does nothing by default; override the moments you need.

    Keep the server/client split (see the module docstring) so the same hook works in a
    Flower deployment. Anything a hook must remember across a resume goes in
    :meth:`state_dict` (tensors allowed). What a hook does beyond that contract it declares in
    :attr:`capabilities` (e.g. ``capabilities = frozenset({Capability.READS_CLIENT_DATA})``).
    """

    #: What this hook declares it does (:class:`Capability`); none by default.
    capabilities: ClassVar[frozenset[Capability]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.capabilities = frozenset(cls.capabilities)
        unknown = [c for c in cls.capabilities if not isinstance(c, Capability)]
        if unknown:
            raise TypeError(
                f"{cls.__name__}.capabilities: {unknown!r} is not a Capability ({[c.name for c in Capability]})"
            )
        # A moment that is only called for hooks declaring it: implementing it undeclared would
        # never run, so the class is refused where it is written.
        if "on_client_data" in cls.__dict__ and Capability.READS_CLIENT_DATA not in cls.capabilities:
            raise TypeError(
                f"{cls.__name__} implements on_client_data but does not declare"
                " capabilities = frozenset({Capability.READS_CLIENT_DATA}): it would never be called"
            )

    #: Whether the hook sets the local optimizers' learning rate before each client's steps (a
    #: round schedule): a checkpoint then holds the last rate set, not the configured one, and
    #: the checkpoint checker (:mod:`~lightning_fed.federation.optimizer_check`) allows it.
    sets_lr: bool = False

    # ------------------------------------------------------------------ the two setups
    def setup_server(self, server: ServerRound, context: RoundContext, module: pl.LightningModule) -> None:
        """Server half, once per fit, after a resumed run's state is loaded, before any evaluation
        or round. Put state restored by :meth:`load_state_dict` back into the server's module here."""

    def setup_client(self, module: pl.LightningModule) -> None:
        """Client half, once per client process (in process: once per fit, on the same module)."""

    def check_run(self, run: Any) -> None:
        """Before the model or the data is built (:mod:`~lightning_fed.run_checks`):
        raise a one-line ``ValueError`` (or ``TypeError``) for a conflict with the run's other settings (its
        ``strategy``, ``compression``, ``privacy``: ``run`` is the
        :class:`~lightning_fed.run.FederatedRun`)."""

    def check_server(self, server: ServerRound) -> None:
        """Server half, when the run is bound to its clients (``server.num_clients``,
        ``server.datamodule``, ``server.module``, ``server.strategy``), before anything is written:
        raise a one-line ``ValueError`` for a configuration that cannot run. Every check that
        needs no trained state belongs here, not in :meth:`setup_server` (which runs after the
        run folder is written). In process the data module is set up here; under Flower it
        is the config's, not set up (the server holds no client data)."""

    # ------------------------------------------------------- client work before a round
    def client_queries(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> dict[int, Payload]:
        """Which clients to ask before the round, and what to send each (``{}``: no exchange).

        May ask clients that are not sampled this round. A payload with
        ``"with_global_state": True`` has the global state loaded into the client's module first.
        """
        return {}

    def answer_query(
        self, module: pl.LightningModule, data: Any, client_id: int, round_idx: int, query: Payload
    ) -> Payload:
        """Client side: answer ``query`` from the client's own data (its ``ClientData``).

        Must be deterministic given the query, the module's state, the data and seeds derived
        from the round and the client.
        """
        return {}

    def on_replies(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, replies: Replies
    ) -> None:
        """Server side: the gathered :class:`Replies` to this hook's queries (a client that failed
        or timed out is missing from ``replies.answers``).

        Runs before :meth:`on_round_start`; may remove clients from the round by editing
        ``replies.clients`` in place.
        """

    def on_round_start(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> None:
        """Before the round's data is laid out.

        May remove clients from this round by editing ``clients`` in place (the round trains
        the list as it is left). Never read client data here: the Flower server holds none
        (use :meth:`on_client_data`, or ask the clients through :meth:`client_queries`).
        """

    def on_client_data(
        self,
        server: ServerRound,
        context: RoundContext,
        module: pl.LightningModule,
        round_idx: int,
        clients: list[int],
        data: Any,
    ) -> None:
        """Server side, **in one process only**: decide from the clients' data itself.

        ``data`` is the run's federated data module (``data.client(c)`` is client ``c``'s
        ``ClientData``). Runs after every hook's :meth:`on_round_start`, before the clients'
        instructions; may edit ``clients`` in place. Called only for a hook that declares
        :attr:`Capability.READS_CLIENT_DATA` (:func:`reads_client_data`). A Flower server holds no
        client data, so such a hook is refused at the start of a Flower run, with one line naming
        it: the centralized baselines of FedHDS do.
        """

    def client_instruction(self, server: ServerRound, client_id: int, round_idx: int) -> Payload:
        """Server side: an extra payload for ``client_id``, carried with its start state."""
        return {}

    def prepare_client(
        self, module: pl.LightningModule, data: Any, client_id: int, round_idx: int, instruction: Payload
    ) -> None:
        """Client side, before the turn's batches are laid out (``data.select(...)`` here
        changes the number of local steps under ``local_epochs``)."""

    def evaluation_instruction(self, server: ServerRound, client_id: int, round_idx: int) -> Payload:
        """Server side, over a transport: an extra payload for ``client_id``'s evaluation of the
        global state after round ``round_idx`` (what the client's model needs beyond that state)."""
        return {}

    def prepare_evaluation(self, module: pl.LightningModule, client_id: int, instruction: Payload) -> None:
        """Client side, over a transport: before ``client_id`` evaluates, with its evaluation instruction."""

    # ---------------------------------------------------------------- during a round
    def on_client_start(
        self, turn: ClientTurn, trainer: pl.Trainer, module: pl.LightningModule, client_id: int
    ) -> None:
        """After the client's state is loaded, before its first local step."""

    def on_client_end(
        self, turn: ClientTurn, trainer: pl.Trainer, module: pl.LightningModule, update: ClientUpdate
    ) -> None:
        """After the client's last local step; ``update`` is what it uploads."""

    def after_aggregate(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int
    ) -> None:
        """After the new global state is loaded into the module, before evaluation."""

    # ------------------------------------------------- what the run's machinery asks
    def privacy_channels(self, privacy: Any) -> dict[str, Any]:
        """What this hook releases of the clients' data, for the run's privacy accounting
        (``privacy`` is the server's :class:`~lightning_fed.privacy.run.RunPrivacy`; ``{}``: nothing).

        Keys: ``channels``: a list of :class:`~lightning_fed.privacy.ChannelReport`, each a line
        of the report for something this hook's clients send (its name, protection, guarantees,
        note), listed as given; one without guarantees counts as not covered for the server and
        the run folder. ``mechanism``: ``{"noise_multiplier": z, "clip": L, "releases": n}`` of a
        Gaussian mechanism every client answers (rate 1), ``n`` releases so far, that the run
        composes with the update channel (``privacy/epsilon_all_channels``); absent when not
        noised. Also the channels the report names itself (``centroids``: FedHDS' accountant
        report; ``selector_losses``: ``True``, FedBiscuit's, whose line the ``mechanism`` fills).
        """
        return {}

    def server_path(self) -> str | None:
        """The Flower server's train-round path this hook asks for: ``"buffered"`` (clients kept
        in flight, replies in their real order: ``deploy/train_rounds/buffered.py``), ``"wall_clock"``
        (a round closed at a wall deadline or target: ``deploy/train_rounds/wall_clock.py``); ``None``: the
        synchronous one."""
        return None

    def summary(self) -> dict[str, Any]:
        """What this hook adds to ``summary.json`` (under ``hooks.<ClassName>``); JSON-serialisable."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def reads_client_data(hook: RoundHook) -> bool:
    """Whether ``hook`` needs the clients' data on the server: it declares
    :attr:`Capability.READS_CLIENT_DATA`."""
    return Capability.READS_CLIENT_DATA in hook.capabilities


def payload_nbytes(payload: Mapping[str, Any]) -> int:
    """Bytes of the tensors in a payload (what a query or a reply adds to the round's traffic)."""
    return sum(v.numel() * v.element_size() for v in payload.values() if torch.is_tensor(v))


def prepare_client(
    hooks: Sequence[RoundHook],
    module: pl.LightningModule,
    data: Any,
    client_id: int,
    round_idx: int,
    instructions: Mapping[int, Payload],
) -> None:
    """Run every hook's :meth:`~RoundHook.prepare_client` with its instruction (by hook index)."""
    for i, hook in enumerate(hooks):
        hook.prepare_client(module, data, client_id, round_idx, dict(instructions.get(i, {})))


def answer_query(
    hooks: Sequence[RoundHook],
    hook_index: int,
    module: pl.LightningModule,
    data: Any,
    client_id: int,
    round_idx: int,
    query: Payload,
    global_state: Mapping[str, torch.Tensor] | None = None,
) -> Payload:
    """A client's answer to hook ``hook_index``'s query; loads ``global_state`` first when the
    query asks for it (:data:`WITH_GLOBAL_STATE`)."""
    if query.get(WITH_GLOBAL_STATE):
        if global_state is None:
            raise ValueError(f"federation.hooks[{hook_index}]: the query asks for the global state, none was sent")
        module.load_state(global_state)
    return hooks[hook_index].answer_query(module, data, client_id, round_idx, query)
