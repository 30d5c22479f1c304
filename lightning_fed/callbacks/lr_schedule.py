"""Per-round learning-rate schedules of the clients' local optimizers.

OpenFedLLM (Ye et al., 2024, arXiv:2402.06954) decays the client learning rate over
communication rounds with a cosine, ``lr_r = min_lr + (lr - min_lr) * (1 + cos(pi r / R)) / 2``
for the 0-based round ``r`` of ``R`` (from ``r = R`` on, ``min_lr``); inside a round every local
step uses ``lr_r``. Here
that is a :class:`RoundHook` (``federation.hooks``), so it runs the same in the simulation
and in a Flower client, and its state (the base learning rates) is part of the federation
checkpoint: a resumed run continues the schedule instead of scaling an already scaled rate.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from lightning_fed.federation.hooks import Capability, RoundHook
from lightning_fed.federation.report import log_scalars
from lightning_fed.hook_rules import LR_SCHEDULES, ROUND_LR_SCHEDULE
from lightning_fed.value_rules import check

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.turn import ClientTurn

SCHEDULES = LR_SCHEDULES


def round_lr(
    base_lr: float,
    round_idx: int,
    rounds: int,
    schedule: str = "cosine",
    min_lr: float = 0.0,
    step_size: int = 1,
    gamma: float = 0.5,
) -> float:
    """The learning rate of 0-based round ``round_idx`` of ``rounds``.

    Args:
        base_lr: The optimizer's configured learning rate (round 0's).
        round_idx: The current 0-based round.
        rounds: ``R`` of the cosine (its annealing length).
        schedule: ``constant``; ``cosine`` (OpenFedLLM:
            ``min_lr + (base_lr - min_lr) * (1 + cos(pi r / R)) / 2``, held at ``min_lr``
            from round ``r = R`` on, without restart); ``step``
            (``base_lr * gamma ** (r // step_size)``).
        min_lr: Floor of the cosine.
        step_size: Rounds between two decays of ``step``.
        gamma: Decay factor of ``step``.
    """
    if schedule == "constant":
        return base_lr
    if schedule == "cosine":
        # Annealing without restart: from round R on the rate stays at the floor (a cos of
        # pi r / R past pi climbs back to base_lr; red team 17 B24).
        return min_lr + (base_lr - min_lr) * (1 + math.cos(math.pi * min(round_idx, rounds) / rounds)) / 2
    if schedule == "step":
        return base_lr * gamma ** (round_idx // step_size)
    raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")


def _rate(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


class RoundLRSchedule(RoundHook):
    """Sets every local optimizer's learning rate to its round's value at each client start.

    Each param group keeps its own base rate (e.g. FedPDPO's ``lr_h`` and ``lr_w``), recorded
    from the optimizers at the first client start and saved with the federation state. All of
    its work is on the client side (the Flower server has no optimizers). The
    round's rate is logged as ``round/lr`` (the first optimizer's first group; one value
    per group in ``summary.json``).

    Args:
        schedule: ``constant``, ``cosine`` or ``step`` (see :func:`round_lr`).
        min_lr: Floor of the cosine (OpenFedLLM's ``min_lr``; 0 by default).
        step_size: Rounds between two decays of ``step``.
        gamma: Decay factor of ``step``.
        rounds: ``R`` of the cosine, the rounds it anneals over; default ``federation.rounds``.
            One below ``federation.rounds`` anneals to ``min_lr`` in ``R`` rounds and then holds it.
    """

    def __init__(
        self,
        schedule: str = "cosine",
        min_lr: float = 0.0,
        step_size: int = 1,
        gamma: float = 0.5,
        rounds: int | None = None,
    ) -> None:
        check(  # lightning_fed/hook_rules.py
            ROUND_LR_SCHEDULE, schedule=schedule, min_lr=min_lr, step_size=step_size, gamma=gamma, rounds=rounds
        )
        self.schedule, self.min_lr, self.step_size, self.gamma, self.rounds = schedule, min_lr, step_size, gamma, rounds
        self.base_lrs: list[list[float]] | None = None
        self.current: list[list[float]] = []
        self._logged_round = -1

    def lr(self, base_lr: float, round_idx: int, rounds: int) -> float:
        """This schedule's rate for ``base_lr`` in ``round_idx``."""
        return round_lr(
            base_lr, round_idx, self.rounds or rounds, self.schedule, self.min_lr, self.step_size, self.gamma
        )

    def _record_base(self, optimizers: list) -> None:
        """The optimizers' configured rates, once; after a resume the restored base is kept (the
        optimizers then hold the last round's scaled rate)."""
        if self.base_lrs is None:
            self.base_lrs = [[float(g["lr"]) for g in opt.param_groups] for opt in optimizers]
        shape = [len(opt.param_groups) for opt in optimizers]
        if [len(groups) for groups in self.base_lrs] != shape:
            raise ValueError(
                f"lr_schedule: the checkpoint's base learning rates have {len(self.base_lrs)} optimizers "
                f"with {[len(g) for g in self.base_lrs]} param groups, the module has {shape}"
            )

    #: Every client of a round gets the same rate: batched turns may train them together.
    capabilities = frozenset({Capability.BATCH_SAFE})

    #: The rate is set at each client start (from the base rates in this hook's state).
    sets_lr = True

    def on_client_start(
        self, turn: ClientTurn, trainer: pl.Trainer, module: pl.LightningModule, client_id: int
    ) -> None:
        # Client side only: the optimizers exist where a client trains (in process and in a Flower
        # client alike); the Flower server has none, so nothing here runs on a server.
        self._record_base(trainer.optimizers)
        round_idx = turn.round_idx
        self.current = [[self.lr(b, round_idx, turn.rounds) for b in groups] for groups in self.base_lrs or []]
        for opt, lrs in zip(trainer.optimizers, self.current):
            for group, lr in zip(opt.param_groups, lrs):
                group["lr"] = lr
        if self.current and round_idx != self._logged_round:
            self._logged_round = round_idx
            log_scalars(trainer, {"round/lr": self.current[0][0]}, step=round_idx + 1)

    def summary(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "base_lrs": self.base_lrs, "last_lrs": self.current}

    def state_dict(self) -> dict[str, Any]:
        return {"base_lrs": self.base_lrs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        base = state.get("base_lrs", self.base_lrs)
        if base is not None and not (
            isinstance(base, list) and all(isinstance(g, list) and all(_rate(b) for b in g) for g in base)
        ):  # the rates every later round is scaled from
            raise ValueError(f"lr_schedule: base_lrs must be lists of finite learning rates > 0, got {base!r}")
        self.base_lrs = base
