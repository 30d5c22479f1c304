"""RoundContext: what a round hook's server half gets instead of a Trainer, in both transports.

The in-process :class:`~lightning_fed.callbacks.FederatedLoop` builds one from its Trainer when
fit starts (:meth:`RoundContext.from_trainer`); the Flower
:class:`~lightning_fed.deploy.FederatedServer` builds one from its output folder. A hook that
logs (``context.loggers`` on ``context.is_global_zero``), writes a file under
``context.log_dir`` or counts extra traffic (``context.add_round_bytes``) therefore runs the same
in a simulation and in a deployment, and never sees a Trainer it could reach into.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def _no_counter(up: int = 0, down: int = 0) -> None:
    raise RuntimeError("this RoundContext counts no bytes (it was built without a server)")


@dataclass
class RoundContext:
    """The run around a round, as the server half of the hooks sees it."""

    rounds: int
    """Number of rounds of the run."""

    seed: int
    """The federation seed (sampling and local randomness)."""

    log_dir: str
    """The run's folder: ``summary.json``, TensorBoard events, the hooks' own files."""

    loggers: list[Any] = field(default_factory=list)
    """Lightning loggers to log round scalars to (``log_metrics(metrics, step=round)``)."""

    global_rank: int = 0
    """This process's rank (under DDP only rank 0 logs and writes)."""

    add_round_bytes: Callable[..., None] = _no_counter
    """``add_round_bytes(up=, down=)``: extra traffic of the current round (a hook's broadcast)."""
    engine: str = "in-process"
    """The transport running the rounds: ``in-process`` (the simulation) or ``flower``."""

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def default_root_dir(self) -> str:
        """The same folder as :attr:`log_dir` (what the round report reads when it has no log_dir)."""
        return self.log_dir

    @classmethod
    def from_trainer(cls, trainer: Any, rounds: int, seed: int, add_round_bytes: Callable[..., None]) -> RoundContext:
        """The in-process run's context (``trainer.log_dir`` is collective: call on every rank)."""
        from lightning_fed.federation.run_folder import share_earlier_files

        context = cls(
            rounds=rounds,
            seed=seed,
            log_dir=str(trainer.log_dir or trainer.default_root_dir),
            loggers=list(trainer.loggers),
            global_rank=int(trainer.global_rank),
            add_round_bytes=add_round_bytes,
        )
        share_earlier_files(trainer, context)  # one run: what the trainer's writers and the report's wait for
        return context
