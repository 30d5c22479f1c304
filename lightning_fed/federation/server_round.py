"""The server's half of a round, one object shared by the in-process loop and the Flower server.

:class:`ServerRound` owns what a round needs on the server side: the strategy, the hooks,
the global state, the run's :class:`~lightning_fed.federation.report.RoundReport`, the
update screen, the fault counters and the hooks' extra traffic. Both transports take the
same steps through it: :meth:`~ServerRound.sample` the clients, :meth:`~ServerRound.prepare`
the round (hook queries, replies, round-start hooks), :meth:`~ServerRound.send` each client
its start state, :meth:`~ServerRound.receive` its update (checked, screened, admitted) or
record a failure (:meth:`~ServerRound.fail`), and :meth:`~ServerRound.close` the round
(``min_clients``, aggregation, after-aggregate hooks, the round's record). The
:class:`~lightning_fed.callbacks.FederatedLoop` holds one as ``loop.server``, the
:class:`~lightning_fed.deploy.FederatedServer` the same one as ``server.server``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lightning.pytorch.utilities import rank_zero_warn

from lightning_fed.compression.uplink import compressor_from_spec, decompress_client_update
from lightning_fed.federation.hooks import Payload, Replies, RoundHook
from lightning_fed.federation.report import RoundReport
from lightning_fed.federation.round_privacy import RoundPrivacy
from lightning_fed.federation.sampling import check_clients_per_round, poisson_sample_clients, sample_clients
from lightning_fed.federation.screening import PRIVATE_REJECTION, UpdateScreen, update_norm
from lightning_fed.state import StateDict, clone_state, state_nbytes
from lightning_fed.strategies.base import AggregationError, ClientUpdate, Strategy, check_update

if TYPE_CHECKING:
    from lightning_fed.compression import UpdateCompressor
    from lightning_fed.run_config import FederationConfig

Ask = Callable[[int, dict[int, Payload]], dict[int, Payload]]
"""How a transport gets one hook's queries answered: ``(hook index, {client: query}) -> {client: reply}``."""


class ServerRound:
    """The server side of the federation (see the module docstring).

    Args:
        strategy: Server aggregation rule.
        hooks: Round hooks.
        rounds: Number of rounds of the run.
        clients_per_round: Clients sampled each round.
        min_clients: A round fails unless at least this many updates are admitted.
        seed: Seed of client sampling (``None``: the run's ``seed_everything`` value).
        screen: Bound on the norm of each client's change.
        sampling: ``fixed_size`` (``clients_per_round``) or ``poisson`` (rate ``sampling_rate``).
        sampling_rate: ``q`` of Poisson sampling.
        compressor: How clients compress their uploads (decoded in :meth:`receive`); ``None``: not.

    ``privacy`` (a :class:`RoundPrivacy`, ``None`` for none) is set by the engine that builds the
    server; :meth:`bind` plans it, :meth:`close` accounts each round and sets :attr:`stopping`
    when the next round would exceed the budget.

    Set by :meth:`bind`: ``num_clients``, ``datamodule`` (in-process the run's
    ``FederatedDataModule``; under Flower the config's, not set up) and ``module``.
    """

    def __init__(
        self,
        strategy: Strategy,
        hooks: list[RoundHook],
        rounds: int,
        clients_per_round: int,
        min_clients: int,
        seed: int | None = None,
        screen: UpdateScreen | None = None,
        sampling: str = "fixed_size",
        sampling_rate: float | None = None,
        compressor: UpdateCompressor | None = None,
    ) -> None:
        self.strategy, self.hooks = strategy, hooks
        self.rounds, self.clients_per_round, self.min_clients = rounds, clients_per_round, min_clients
        self.sampling, self.sampling_rate = sampling, sampling_rate
        self.privacy: RoundPrivacy | None = None
        #: Why the run stops before its last round (``None``: it does not).
        self.stop_reason: str | None = None
        self._seed = seed
        self.screen = screen or UpdateScreen()
        self.compressor = compressor
        self.report = RoundReport()
        self.global_state: StateDict = {}
        self.num_clients = 0
        self.datamodule: Any = None
        self.module: Any = None  # the run's module (its shared parameters: the global state to be), set by bind
        self.engine = "in-process"  # the transport running the rounds, set by bind
        self.failed_clients = self.rejected_updates = self.clipped_updates = 0
        self._extra_bytes = [0, 0]  # [up, down] added by hooks, reset when a round is closed
        self._open_round(-1, [])

    @classmethod
    def from_config(
        cls,
        config: FederationConfig,
        strategy: Strategy,
        hooks: list[RoundHook],
        compressor: UpdateCompressor | None = None,
    ) -> ServerRound:
        """The server half of a run described by ``config`` (both transports build it so, through
        :func:`~lightning_fed.run_factory.server_round`, which gives the run's
        ``compressor``, parsed once; without one it is parsed from ``config.compression``)."""
        screen = UpdateScreen(config.max_update_norm, config.on_large_update)
        if compressor is None:
            compressor = compressor_from_spec(config.compression)
        return cls(
            strategy,
            hooks,
            config.rounds,
            config.clients_per_round,
            config.min_clients,
            config.seed,
            screen,
            config.sampling,
            config.sampling_rate,
            compressor,
        )

    @property
    def seed(self) -> int:
        if self._seed is None:
            self._seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        return self._seed

    @seed.setter
    def seed(self, value: int | None) -> None:
        self._seed = value

    def bind(self, num_clients: int, datamodule: Any = None, module: Any = None, engine: str = "in-process") -> None:
        """Attach the federation's size (validated against ``clients_per_round``), its data and the
        transport that will run the rounds (``engine``: ``in-process`` or ``flower``, as
        :attr:`RoundContext.engine`), then plan the run's privacy (before training: an impossible
        budget raises here)."""
        if self.sampling == "fixed_size":
            check_clients_per_round(self.clients_per_round, num_clients)
        self.num_clients, self.datamodule, self.engine = num_clients, datamodule, engine
        self.module = module
        for hook in self.hooks:  # e.g. ClientRanks reads a data column: a bad one fails before anything is written
            hook.check_server(self)
        if self.privacy is not None:
            self.privacy.plan(self, module)
            self.report.private = self.privacy.enabled
            # the clients' validation data: nothing of it is written in a private run unless opted in
            self.report.withhold_validation = self.privacy.enabled and not self.privacy.report_validation

    @property
    def expected_clients(self) -> float:
        """``m``, the expected number of clients of a round: ``clients_per_round`` or ``q * N``."""
        if self.sampling == "poisson":
            return float(self.sampling_rate) * self.num_clients
        return float(self.clients_per_round)

    @property
    def stopping(self) -> bool:
        """Whether the run stops after the round just closed (:attr:`stop_reason` says why)."""
        return self.stop_reason is not None

    # ------------------------------------------------------------------ before a round
    def sample(self, round_idx: int) -> list[int]:
        """The round's clients: a pure function of (seed, round); Poisson rounds may be empty. A
        private run samples from its secret (:attr:`RoundPrivacy.sampling_seed`), not from ``seed``."""
        secret = self.privacy.sampling_seed if self.privacy is not None else None
        seed = self.seed if secret is None else secret
        if self.sampling == "poisson":
            return poisson_sample_clients(self.num_clients, float(self.sampling_rate), seed, round_idx)
        return sample_clients(self.num_clients, self.clients_per_round, seed, round_idx)

    def prepare(self, trainer: Any, module: Any, round_idx: int, clients: list[int], ask: Ask) -> None:
        """Each hook's queries, answered through ``ask``, then its ``on_replies``; then every
        hook's ``on_round_start``. ``clients`` may be edited in place by the hooks."""
        for i, hook in enumerate(self.hooks):
            queries = hook.client_queries(self, trainer, module, round_idx, list(clients))
            if queries:
                hook.on_replies(self, trainer, module, Replies(round_idx, clients, ask(i, queries)))
        for hook in self.hooks:
            hook.on_round_start(self, trainer, module, round_idx, clients)

    def client_instructions(self, client_id: int, round_idx: int) -> dict[int, Payload]:
        """Every hook's extra payload for ``client_id`` (by hook index; empty ones left out)."""
        out = {i: hook.client_instruction(self, client_id, round_idx) for i, hook in enumerate(self.hooks)}
        return {i: p for i, p in out.items() if p}

    def add_round_bytes(self, up: int = 0, down: int = 0) -> None:
        """Count extra traffic of the current round (e.g. a hook's broadcast or uploads).

        Callable from any hook, ``on_round_start`` included; it lands in this round's
        ``comm/up_bytes``/``comm/down_bytes`` and summary record.
        """
        self._extra_bytes[0] += int(up)
        self._extra_bytes[1] += int(down)

    # ------------------------------------------------------------------ during a round
    def _open_round(self, round_idx: int, clients: list[int]) -> None:
        self.round_idx, self.clients = round_idx, list(clients)
        self._sent: dict[int, StateDict] = {}
        self._valid: list[ClientUpdate] = []
        self.failed: list[int] = []
        self.causes: dict[int, str] = {}
        self.rejected: dict[int, str] = {}
        self._up = self._down = 0
        self._t0 = time.perf_counter()

    def open(self, round_idx: int, clients: list[int]) -> None:
        """Start round ``round_idx`` with the clients that train in it (after :meth:`prepare`)."""
        self._open_round(round_idx, clients)

    def client_start(self, client_id: int) -> tuple[StateDict, StateDict]:
        """What the server sends ``client_id``: its start state and the downlink extras."""
        return self.strategy.client_model(client_id, self.global_state), self.strategy.downlink(client_id)

    def send(self, client_id: int) -> tuple[StateDict, StateDict]:
        """:meth:`client_start`, counted in the round's downlink and remembered to check the update."""
        start, downlink = self.client_start(client_id)
        self._sent[client_id] = start
        self._down += state_nbytes(start) + state_nbytes(downlink)
        return start, downlink

    def join(self, client_id: int) -> tuple[StateDict, StateDict]:
        """``client_id`` joins the open round as it arrives (an asynchronous step's clients are its
        arrivals, in their order): listed in :attr:`clients`, then :meth:`send`."""
        self.clients.append(client_id)
        return self.send(client_id)

    def sent(self, client_id: int) -> StateDict | None:
        """The start state ``client_id`` was sent this round (``None``: it was not sent one)."""
        return self._sent.get(client_id)

    def fail(self, client_id: int, cause: str | None = None) -> None:
        """``client_id`` failed (raised, or never answered): left out of the round, counted; ``cause``
        (one line) is named if the round then fails."""
        self.failed.append(client_id)
        if cause:
            self.causes.setdefault(client_id, cause)
        self.failed_clients += 1

    def reject(self, client_id: int, reason: str) -> None:
        """``client_id``'s update is rejected (malformed, or too large), counted, with a warning.

        In a private run the warning names neither the client nor the reason (a norm is a
        per-client figure no epsilon covers), and the round's record keeps neither (:class:`RoundReport`).
        """
        self.rejected[client_id] = reason
        self.rejected_updates += 1
        if self.report.private:
            rank_zero_warn(f"round {self.round_idx + 1}: {PRIVATE_REJECTION}")
        else:
            rank_zero_warn(f"round {self.round_idx + 1}: update of client {client_id} rejected: {reason}")

    def receive(self, update: ClientUpdate) -> None:
        """Count ``update``'s upload (compressed: the payload's bytes), decode it, then :meth:`admit`
        it or :meth:`reject` it."""
        self._up += state_nbytes(update.state) + state_nbytes(update.extras)
        try:
            if self.compressor is not None:
                update = decompress_client_update(update, self._sent[update.client_id], self.compressor)
            self._valid.append(self.admit(self._sent[update.client_id], update))
        except AggregationError as err:
            self.reject(update.client_id, str(err))

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

    def close(self, trainer: Any, module: Any) -> None:
        """Aggregate the admitted updates into the next global state, load it into the module,
        run the after-aggregate hooks and record the round; fail below ``min_clients``.

        A Poisson round that sampled no client has no update: the global state stays, unless the
        strategy ``releases_empty_rounds`` (``ClientLevelDP``: the noise on a zero sum is released,
        as the accountant assumes); the round is recorded and accounted. With Poisson sampling a
        round needs ``min(min_clients, sampled)`` valid updates.
        """
        round_idx, valid = self.round_idx, sorted(self._valid, key=lambda u: u.client_id)
        self._sent, self._valid = {}, []  # not kept alive through evaluation
        needed = min(self.min_clients, len(self.clients)) if self.sampling == "poisson" else self.min_clients
        if len(valid) < needed:
            if self.report.private:  # the sample is secret: neither the clients nor their number
                raise RuntimeError(
                    f"round {round_idx + 1}: too few clients returned a valid update"
                    f" (fewer than federation.min_clients={self.min_clients})"
                )
            raise RuntimeError(
                f"round {round_idx + 1}: only {len(valid)} of {len(self.clients)} clients returned a valid update,"
                f" fewer than federation.min_clients={self.min_clients}"
                + (
                    ""
                    if self.report.private
                    else f" (failed: {sorted(self.failed)}, rejected: {sorted(self.rejected)})"
                )
                + "".join(f"; client {c} failed: {why}" for c, why in sorted(self.causes.items())[:1])
            )
        if valid or getattr(self.strategy, "releases_empty_rounds", False):
            self.global_state = clone_state(self.strategy.aggregate(self.global_state, valid))
            module.load_state(self.global_state)
        for hook in self.hooks:
            hook.after_aggregate(self, trainer, module, round_idx)
        extra, self._extra_bytes = self._extra_bytes, [0, 0]
        scalars = self.privacy.end_round(round_idx, valid) if self.privacy is not None else {}
        self.report.end_round(
            trainer,
            round_idx,
            clients=self.clients,
            updates=valid,
            failed=sorted(self.failed),
            rejected=self.rejected,
            up_bytes=self._up + extra[0],
            down_bytes=self._down + extra[1],
            seconds=time.perf_counter() - self._t0,
            scalars=scalars,
        )
        self.check_budget(round_idx + 1)

    def check_budget(self, next_round: int) -> None:
        """Set :attr:`stop_reason` when running round ``next_round`` (0-based) of the run would exceed
        a privacy budget: after each round, and when a checkpoint is loaded (a run resumed with more
        ``federation.rounds`` than its budget allows stops before its first round)."""
        privacy = self.privacy
        if privacy is not None and next_round < self.rounds and privacy.would_exceed(next_round):
            privacy.stopped(next_round)
            self.stop_reason = f"round {next_round + 1} would exceed the privacy budget ({privacy.exceeded})"

    # ------------------------------------------------------------------ the run's record
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

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the server (besides the state the loop saves)."""
        return {
            "global_state": self.global_state,
            "strategy": self.strategy.state_dict(),
            "hooks": [h.state_dict() for h in self.hooks],
            "report": self.report.state_dict(),
            **({"privacy": self.privacy.state_dict()} if self.privacy is not None else {}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_state = clone_state(state["global_state"])
        self.strategy.load_state_dict(state.get("strategy", {}))
        for hook, hook_state in zip(self.hooks, state.get("hooks", [])):
            hook.load_state_dict(hook_state)
        self.report.load_state_dict(state.get("report", {}))
        if self.privacy is not None:
            self.privacy.load_state_dict(state.get("privacy", {}))
            self.check_budget(len(self.report.history))

    def privacy_section(self) -> dict[str, Any]:
        """``summary.json``'s ``privacy`` section (``{"enabled": False}`` without a privacy plan)."""
        if self.privacy is None:
            return {"enabled": False}
        return self.privacy.section(len(self.report.history))
