"""FederatedRun: one federated run, assembled once, as data, from the ``federation:`` section.

A run is its :class:`~lightning_fed.federation.config.FederationConfig` (rounds, sampling,
local work, faults, evaluation, compression: plain data, validated once) plus the three
settings that are objects: the ``strategy``, the round ``hooks`` and the ``privacy`` budget.
It is the parse target of the ``federation:`` section (``lightning-fed fit`` and the Flower
apps parse the same YAML into it), so each option is declared once, as a field here or on
:class:`FederationConfig`, and the YAML keys, these fields and ``lightning-fed fit --help``'s
``--federation.*`` options are the same names.

Both transports build what they need from it, through the methods below, so a spec is
parsed once (``compression``) and a question is answered in one place ("is this run
private": :meth:`FederatedRun.is_private`):

- :meth:`FederatedRun.server_round`: the server half (sampling, admission, aggregation, the
  run's privacy plan), held by the in-process :class:`~lightning_fed.callbacks.FederatedLoop`
  and by the Flower :class:`~lightning_fed.deploy.FederatedServer`;
- :meth:`FederatedRun.evaluation_plan`: which clients each evaluation covers;
- :meth:`FederatedRun.store`: where the clients' own states are kept;
- :attr:`FederatedRun.compressor`: how a client compresses its upload;
- :meth:`FederatedRun.client_turn`: one client's turn, in both transports.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

from lightning_fed.compression.compressor import UpdateCompressor
from lightning_fed.compression.uplink import compressor_from_spec
from lightning_fed.federation.config import FederationConfig
from lightning_fed.federation.evaluation_plan import EvaluationPlan
from lightning_fed.federation.hooks import RoundHook
from lightning_fed.federation.server_round import ServerRound
from lightning_fed.federation.store import ClientStateStore
from lightning_fed.federation.turn import ClientTurn
from lightning_fed.privacy.config import PrivacyConfig
from lightning_fed.privacy.run import RunPrivacy, privacy_enabled
from lightning_fed.state import StateDict
from lightning_fed.strategies.base import Strategy
from lightning_fed.strategies.fedavg import FedAvg


@dataclass(frozen=True)
class FederatedRun(FederationConfig):
    """The ``federation:`` section of a run: its :class:`FederationConfig` plus its objects.

    Build it from the YAML (``lightning-fed fit``, the Flower apps) or directly, e.g.
    ``FederatedRun(rounds=2, strategy=Scaffold())``; then ``FederatedLoop(run)`` runs it in
    process and ``FederatedServer(run, ...)`` over Flower.
    """

    strategy: Strategy | None = None
    """Server aggregation rule (default: FedAvg weighted by ``|D_k|``)."""

    hooks: list[RoundHook] | None = None
    """Round-level method hooks (data selection, server-side training...), in order."""

    privacy: PrivacyConfig | None = None
    """Client-level privacy budget (needs ``strategy: ClientLevelDP``): see ``docs/privacy.md``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.strategy is None:
            object.__setattr__(self, "strategy", FedAvg())
        object.__setattr__(self, "hooks", list(self.hooks or []))

    @cached_property
    def config(self) -> FederationConfig:
        """The run's settings that are plain data (what ``summary.json`` and checks compare)."""
        return FederationConfig(**{f.name: getattr(self, f.name) for f in fields(FederationConfig)})

    def to_dict(self) -> dict[str, Any]:
        """The plain-data fields (not the strategy, hooks or privacy objects)."""
        return self.config.to_dict()

    @property
    def resolved_seed(self) -> int:
        """``seed``, else the run's ``seed_everything`` value (``PL_GLOBAL_SEED``, as the server's)."""
        return self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))

    @cached_property
    def compressor(self) -> UpdateCompressor | None:
        """How clients compress their uploads (``compression``, parsed here once; ``None``: not).

        A compressor holds only its settings (error feedback lives in each client's memory), so
        the server's decoder and every client turn share this one.
        """
        return compressor_from_spec(self.compression)

    # ---------------------------------------------------------------- the server's half
    def run_privacy(self) -> RunPrivacy:
        """A fresh privacy plan of this run (planned by :meth:`ServerRound.bind`)."""
        return RunPrivacy(self.privacy, self.local_steps, self.local_epochs)

    def server_round(self) -> ServerRound:
        """The server half of this run, with its privacy plan (both transports build it so)."""
        server = ServerRound.from_config(self.config, self.strategy, self.hooks, self.compressor)
        server.report.per_client_scalars = self.per_client_scalars
        server.privacy = self.run_privacy()
        return server

    def evaluation_plan(self) -> EvaluationPlan:
        """Which clients each evaluation covers (``eval_clients``, ``eval_panel_size``, ``eval_every``)."""
        return EvaluationPlan(self.eval_clients, self.eval_panel_size, self.eval_every, self.rounds)

    def store(self) -> ClientStateStore:
        """A store of the clients' own states (``max_state_memory_bytes``, ``state_offload_dir``)."""
        return ClientStateStore(self.max_state_memory_bytes, self.state_offload_dir)

    # ---------------------------------------------------------------- the clients' half
    def is_private(self, module: Any) -> bool:
        """Whether this run with ``module`` runs a DP mechanism (client-level through the strategy,
        example-level through the module): the one answer both transports' turns use."""
        return privacy_enabled(self.strategy, module)

    def client_turn(
        self,
        client_id: int,
        round_idx: int,
        store: ClientStateStore,
        num_examples: int,
        initial_personal: StateDict,
        module: Any,
        seed: int | None = None,
    ) -> ClientTurn:
        """The turn of ``client_id`` in round ``round_idx`` (0-based) training ``module``, as both
        transports run it (``seed``: the server's resolved seed, default :attr:`resolved_seed`;
        private per :meth:`is_private`)."""
        return ClientTurn(
            client_id,
            round_idx,
            self.rounds,
            self.resolved_seed if seed is None else seed,
            self.strategy,
            store,
            num_examples,
            self.hooks,
            initial_personal,
            self.compressor,
            private=self.is_private(module),
        )
