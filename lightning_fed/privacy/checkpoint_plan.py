"""A private run's checkpoint against the run's privacy plan, once the plan is made.

A resume restores the clipping norm ``C`` (``federation.strategy.clip_norm``, kept by
:class:`~lightning_fed.privacy.ClientLevelDP`) and the noise multiplier ``z``
(``federation.privacy.noise_multiplier``, kept by :class:`~lightning_fed.privacy.run.RunPrivacy`)
from the checkpoint, over the configured ones. Both were accepted as they were: ``clip_norm=-1``
or ``noise_multiplier=0.01`` resumed a run whose reported epsilon no longer described its noise
(found from outside, issue 41). What a run of this config writes, and so what is accepted:

* ``clip_norm``: a finite number > 0; the configured one unless the clip is adaptive (then it moves
  every round, Andrew et al. 2021);
* ``noise_multiplier``: the ``z`` this run's plan gives: ``federation.privacy.noise_multiplier``,
  the strategy's own, or the one calibrated from ``federation.privacy.target_epsilon`` for the rounds
  the run planned when it started (``federation.privacy.planned_rounds``, kept through every resume:
  a resume keeps that ``z`` when ``federation.rounds`` changes).

It needs the plan, so the CLI calls :func:`check_privacy_plan` after the server is bound (which
writes nothing), still before the run folder is touched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.errors import CheckpointError

Problem = tuple[str, str]

REL_TOL = 1e-9
"""The calibration is the same computation on the same inputs: the same ``z`` up to rounding."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _dp_state(strategy: Any, state: Any, dp: Any, where: str) -> tuple[Any, str] | None:
    """The part of the strategy's checkpointed state that ``dp`` (a ClientLevelDP) wrote, and its path."""
    while strategy is not None and isinstance(state, Mapping):
        if strategy is dp:
            return state, where
        strategy, state, where = getattr(strategy, "strategy", None), state.get("strategy"), f"{where}.strategy"
    return None


def _planned_rounds(ckpt: Mapping[str, Any], default: int) -> int:
    """The rounds the checkpoint's ``z`` was calibrated for: ``federation.privacy.planned_rounds``,
    or (a checkpoint written before it was kept) its stored config's ``federation.rounds``."""
    privacy = ckpt["federation"].get("privacy")
    planned = privacy.get("planned_rounds") if isinstance(privacy, Mapping) else None
    if isinstance(planned, int) and not isinstance(planned, bool) and planned > 0:
        return planned
    report = ckpt["federation"].get("report")
    config = report.get("config") if isinstance(report, Mapping) else None
    federation = config.get("federation") if isinstance(config, Mapping) else None
    rounds = federation.get("rounds") if isinstance(federation, Mapping) else None
    return rounds if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds > 0 else default


def configured_noise(server: Any, ckpt: Mapping[str, Any]) -> tuple[float, str] | None:
    """The ``z`` this run's plan gives and where it comes from, or ``None`` (no client-level DP)."""
    privacy = server.privacy
    accountant = getattr(privacy, "client_dp", None)
    if accountant is None:
        return None
    config = privacy.config
    if config is None or not config.client_level:
        return float(accountant.noise_multiplier), "federation.strategy.noise_multiplier"
    if config.noise_multiplier is not None:
        return float(config.noise_multiplier), "federation.privacy.noise_multiplier"
    rounds = _planned_rounds(ckpt, server.rounds)
    z = accountant.noise_multiplier
    if rounds != server.rounds:
        rate = server.sampling_rate or 0.0
        z = config.plan(server.num_clients, rounds, server.sampling, server.clients_per_round, rate).noise_multiplier
    source = f"calibrated for federation.privacy.target_epsilon={config.target_epsilon:g} over {rounds} rounds"
    return float(z), source


def privacy_plan_problem(ckpt: Mapping[str, Any], server: Any) -> Problem | None:
    """The first privacy parameter of ``ckpt`` that is out of range or not this run's (module docstring)."""
    from lightning_fed.privacy.client_dp import client_level_dp

    fed = ckpt.get("federation")
    if not isinstance(fed, Mapping) or getattr(server, "privacy", None) is None:
        return None
    dp = client_level_dp(server.strategy)
    found = _dp_state(server.strategy, fed.get("strategy"), dp, "federation.strategy") if dp is not None else None
    if found is not None and "clip_norm" in found[0]:
        state, where = found
        clip = state["clip_norm"]
        if not (_number(clip) and clip > 0):
            return f"{where}.clip_norm", f"is {clip!r}, expected a finite clipping norm > 0"
        if dp.adaptive is None and not math.isclose(clip, dp.clip_norm, rel_tol=REL_TOL):
            return f"{where}.clip_norm", f"is {clip!r}, this run's configured clip_norm is {dp.clip_norm!r}"
    state = fed.get("privacy")
    z = state.get("noise_multiplier") if isinstance(state, Mapping) else None
    if z is None:
        return None
    if not (_number(z) and z > 0):
        return "federation.privacy.noise_multiplier", f"is {z!r}, expected a finite noise multiplier > 0"
    expected = configured_noise(server, ckpt)
    if expected is not None and not math.isclose(z, expected[0], rel_tol=REL_TOL):
        return (
            "federation.privacy.noise_multiplier",
            f"is {z!r}, this run's privacy plan has {expected[0]!r} ({expected[1]})",
        )
    return None


def check_privacy_plan(path: str | Path, ckpt: Mapping[str, Any], server: Any) -> None:
    """:func:`privacy_plan_problem` as one line.

    Raises:
        CheckpointError: ``"ckpt_path '<file>': <part> <what is wrong>"``.
    """
    if problem := privacy_plan_problem(ckpt, server):
        part, what = problem
        raise CheckpointError(f"ckpt_path {str(path)!r}: {part} {what}")
