"""Multi-stage methods as explicit pipelines: a stage that needs another run's result gets it here.

FedBis / FedBiscuit (:mod:`~lightning_fed.pipelines.fedbis`) train the selector(s) federatedly
(stage 1) and then RLFT the policy on pairs the selectors label (stage 2). A DataModule only
serves records; which run comes first, and what it hands to the next, is written out here.

The CLI calls :func:`prepare_stages` after building the model and data and before the fit. A
pipeline runs an earlier stage through the ``fit`` callable it is given (the CLI passes its own
``main``), so nothing in the package imports the CLI but the entry points.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning_fed.pipelines.fedbis import Fit, flower_refusal, prepare_rlft

PIPELINES: tuple[Callable[[Any, Any, Fit, Any], bool], ...] = (prepare_rlft,)
"""Each takes ``(model, datamodule, fit, device)``, prepares its stages when the run is one of
its method's, and returns whether it did."""


def prepare_stages(model: Any, datamodule: Any, fit: Fit, device: Any = None) -> bool:
    """Run the stages that must come before this fit (e.g. FedBis stage 1); ``True`` if any did."""
    return any(prepare(model, datamodule, fit, device) for prepare in PIPELINES)


def flower_refusals(datamodule: Any) -> list[str]:
    """One line per stage of this run that cannot run under Flower (see each pipeline's reason)."""
    return [line for refuse in (flower_refusal,) if (line := refuse(datamodule)) is not None]


__all__ = ["PIPELINES", "Fit", "flower_refusals", "prepare_rlft", "prepare_stages"]
