"""FederationConfig: how a federated run is organised, as plain data (litgpt ``Config`` style).

One dataclass, validated once in ``__post_init__`` (every problem named by its YAML key, all of
them in one message). :class:`~lightning_fed.run.FederatedRun` extends it with the three
settings that are objects (``strategy``, ``hooks``, ``privacy``) and is what the
``federation:`` section parses into. Importing this module imports no torch: the choices the
fields are checked against are :mod:`lightning_fed.run_options`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lightning_fed.federation_rules import federation_problems
from lightning_fed.run_options import DEFAULT_PANEL_SIZE, DEFAULT_PER_CLIENT_SCALARS


@dataclass(frozen=True)
class FederationConfig:
    """The ``federation:`` section of a run, less its objects (strategy, hooks, privacy: see
    :class:`~lightning_fed.run.FederatedRun`)."""

    rounds: int = 10
    """Number of communication rounds (sets ``trainer.max_epochs``)."""

    clients_per_round: int = 2
    """Clients sampled uniformly without replacement each round (``sampling: fixed_size``)."""

    sampling: str = "fixed_size"
    """``fixed_size`` (``clients_per_round`` clients each round) or ``poisson`` (each client
    independently with probability ``sampling_rate``; a round may have no client)."""

    sampling_rate: float | None = None
    """``q`` of Poisson sampling (``sampling: poisson`` only)."""

    local_steps: int | None = 10
    """Optimizer steps per client per round (K). Exclusive with ``local_epochs``."""

    local_epochs: int | None = None
    """Passes over the client's data per round instead of fixed steps."""

    min_clients: int = 1
    """A round fails unless at least this many clients return a valid update."""

    isolate_failures: bool = True
    """Leave a client that raises during local training out of the round (warning, counter)."""

    seed: int | None = None
    """Seed of client sampling and local randomness (``None``: the run's ``seed_everything``)."""

    max_state_memory_bytes: int | None = None
    """Keep at most this many bytes of per-client state in memory; the rest is read from its file
    in ``state_offload_dir`` on the client's next turn."""

    state_offload_dir: str | None = None
    """Folder of the per-client state files (one per client and version, referenced by the
    checkpoints; default ``<run>/client_states``; one folder per run)."""

    save_adapter: bool = True
    """Write the final global adapter as a PEFT folder at the end of fit."""

    max_update_norm: float | None = None
    """Bound on the L2 norm of a client's change ``w_k - w``; a larger (e.g. poisoned, scaled)
    update is handled per ``on_large_update`` (``None``: no bound)."""

    on_large_update: str = "reject"
    """``reject`` an update beyond ``max_update_norm`` or ``clip`` its change to it."""

    per_client_scalars: int = DEFAULT_PER_CLIENT_SCALARS
    """A TensorBoard scalar per client and metric (``client_<k>/*``) while a round reports at most
    this many clients; beyond it, one histogram per metric (``clients/*``). Either way the
    per-client values are in ``<run>/client_metrics/`` and each metric's percentiles over clients
    are logged (``round/*_client_p50``...)."""

    eval_clients: str | None = None
    """Clients evaluated with the global state: ``all``, ``sampled`` or ``panel`` (``None``: the
    ``panel`` in ``fit``, all clients in a standalone ``validate``/``test``)."""

    eval_panel_size: int = DEFAULT_PANEL_SIZE
    """Clients in the evaluation panel, drawn once from ``seed`` (``>= N``: all clients)."""

    eval_every: int = 1
    """Evaluate after every n-th round and after the last; the initial evaluation (before round 1)
    runs unless ``trainer.num_sanity_val_steps`` is 0."""

    compression: str | None = None
    """Compress each client's upload: ``int8``, ``int4`` (``+ef``: error feedback),
    ``topk:<fraction>`` (``-noef``: without error feedback); ``None``: full precision."""

    batch_clients: int | str = "auto"
    """Train a round's clients together, in process: ``auto`` (the default: the largest K the memory
    allows, at most 4 on a CPU), an integer K (groups of up to K clients) or ``off`` (one after
    another). Each step then runs one backbone forward over the group's concatenated batches, each
    client's LoRA factors (and personal tensors) applied to its own rows; each client's update is the
    one its sequential turn uploads (within float32 rounding; under dropout, in distribution). The K
    ``auto`` chose is said in one line at start and recorded in the run's config (``config.yaml``,
    ``summary.json``, the checkpoint), so a rerun of that config and a resume train with the same K.
    Clients with different local step counts train in different groups. Falls back to sequential
    turns, said in one line at start, for a module that does not declare ``batchable`` (FedRep,
    FedPDPO, Per-FedAvg, FedBiOT...), DP-SGD, per-client round hooks, manual optimization, a
    per-step lr scheduler, ``16-mixed`` precision and data parallelism; a Flower client trains one
    client anyway (see ``docs/developer/batching.md``)."""

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        """Every invalid field, each a one-line message naming its ``federation.`` key (the
        precheck applies the same function before torch: :mod:`lightning_fed.federation_rules`)."""
        return federation_problems(self.__dict__)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data (what the ``federation:`` YAML section holds)."""
        return asdict(self)
