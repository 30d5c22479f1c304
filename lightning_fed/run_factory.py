"""What each transport needs, built from a :class:`~lightning_fed.run.FederatedRun`: the one factory.

The run is data (:mod:`lightning_fed.run`); this module sits above the packages it builds
(``federation``, ``privacy``, ``compression``) so that none of them imports the run, and a
spec is parsed and a question answered in one place ("is this run private": :func:`is_private`):

- :func:`server_round`: the server half (sampling, admission, aggregation, the run's privacy
  plan), held by the in-process :class:`~lightning_fed.callbacks.FederatedLoop` and by the
  Flower :class:`~lightning_fed.deploy.FederatedServer`;
- :func:`evaluation_plan`: which clients each evaluation covers;
- :func:`store`: where the clients' own states are kept;
- :func:`compressor`: how a client compresses its upload;
- :func:`client_turn`: one client's turn, in both transports.
"""

from __future__ import annotations

import os
from typing import Any

from lightning_fed.compression.compressor import UpdateCompressor
from lightning_fed.compression.uplink import compressor_from_spec
from lightning_fed.federation.evaluation_plan import EvaluationPlan
from lightning_fed.federation.server_round import ServerRound
from lightning_fed.federation.store import ClientStateStore
from lightning_fed.federation.turn import ClientTurn
from lightning_fed.privacy.run import RunPrivacy, privacy_enabled
from lightning_fed.run import FederatedRun
from lightning_fed.state import StateDict


def resolved_seed(run: FederatedRun) -> int:
    """``run.seed``, else the run's ``seed_everything`` value (``PL_GLOBAL_SEED``, as the server's)."""
    return run.seed if run.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))


def compressor(run: FederatedRun) -> UpdateCompressor | None:
    """How clients compress their uploads (``compression``; ``None``: not). A compressor holds only
    its settings (error feedback lives in each client's memory), so one built per use is the same."""
    return compressor_from_spec(run.compression)


def run_privacy(run: FederatedRun) -> RunPrivacy:
    """A fresh privacy plan of ``run`` (planned by :meth:`ServerRound.bind`)."""
    return RunPrivacy(run.privacy, run)


def server_round(run: FederatedRun) -> ServerRound:
    """The server half of ``run``, with its privacy plan (both transports build it so)."""
    server = ServerRound.from_config(run.config, run.strategy, run.hooks, compressor(run))
    server.report.per_client_scalars = run.per_client_scalars
    server.privacy = run_privacy(run)
    return server


def evaluation_plan(run: FederatedRun) -> EvaluationPlan:
    """Which clients each evaluation covers (``eval_clients``, ``eval_panel_size``, ``eval_every``)."""
    return EvaluationPlan(run.eval_clients, run.eval_panel_size, run.eval_every, run.rounds)


def store(run: FederatedRun) -> ClientStateStore:
    """A store of the clients' own states (``max_state_memory_bytes``, ``state_offload_dir``)."""
    return ClientStateStore(run.max_state_memory_bytes, run.state_offload_dir)


def is_private(run: FederatedRun, module: Any) -> bool:
    """Whether ``run`` with ``module`` runs a DP mechanism (client-level through the strategy,
    example-level through the module): the one answer both transports' turns use."""
    return privacy_enabled(run.strategy, module)


def client_turn(
    run: FederatedRun,
    client_id: int,
    round_idx: int,
    store: ClientStateStore,
    num_examples: int,
    initial_personal: StateDict,
    module: Any,
    seed: int | None = None,
) -> ClientTurn:
    """The turn of ``client_id`` in round ``round_idx`` (0-based) training ``module``, as both
    transports run it (``seed``: the server's resolved seed, default :func:`resolved_seed`;
    private per :func:`is_private`)."""
    return ClientTurn(
        client_id,
        round_idx,
        run.rounds,
        resolved_seed(run) if seed is None else seed,
        run.strategy,
        store,
        num_examples,
        run.hooks,
        initial_personal,
        compressor(run),
        private=is_private(run, module),
    )
