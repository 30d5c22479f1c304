"""Whether a config's clients can train together, as ``lightning-fed plan`` says it before any run.

The run decides it from its built module, hooks and trainer
(:func:`~lightning_fed.batching.fallback.batching_fallback`); the planner builds no model, so it asks
the rules that need none, in the run's order: the module's class and the round hooks
(:func:`~lightning_fed.batching.fallback.class_fallback`), then the trainer's precision and processes
as the config states them. A reason found here is the one the run says at start.
"""

from __future__ import annotations

import importlib
from typing import Any


def planned_fallback(config: dict[str, Any], hooks: list[Any]) -> str | None:
    """Why the run of ``config`` (parsed, :func:`~lightning_fed.plan_cli.plan_config`) with its round
    ``hooks`` trains its clients one after another, or ``None`` when the rules read before a model is
    built let them train together."""
    from lightning_fed.batching.fallback import class_fallback, trainer_settings_fallback

    path = str(config["model"]["class_path"])
    module, _, name = path.rpartition(".")
    reason = class_fallback(getattr(importlib.import_module(module), name), hooks)
    if reason is not None:
        return reason
    trainer = config.get("trainer") or {}
    return trainer_settings_fallback(trainer.get("precision"), _processes(trainer))


def _processes(trainer: dict[str, Any]) -> int:
    """The processes ``trainer.devices`` x ``trainer.num_nodes`` make (1 where they are not counts)."""
    devices, nodes = trainer.get("devices"), trainer.get("num_nodes")
    count = len(devices) if isinstance(devices, list) else devices if isinstance(devices, int) and devices > 0 else 1
    return count * (nodes if isinstance(nodes, int) and nodes > 0 else 1)
