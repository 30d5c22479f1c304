"""Server strategies: pure aggregation rules over named tensors.

Every concrete :class:`Strategy` subclass that has been imported is selectable by its class
name (``--federation.strategy=FedNova``); see :mod:`lightning_fed.strategies.registry` for how
a user's own strategy joins (by subclassing, imported by full path or by an entry point).
"""

from lightning_fed.strategies.base import (
    AggregationError,
    ClientUpdate,
    LocalCorrection,
    Strategy,
    check_update,
    weighted_average,
)
from lightning_fed.strategies.fedadagrad import FedAdagrad
from lightning_fed.strategies.fedadam import FedAdam
from lightning_fed.strategies.fedamp import FedAMP
from lightning_fed.strategies.fedavg import FedAvg
from lightning_fed.strategies.fedavgm import FedAvgM
from lightning_fed.strategies.fednova import FedNova, StepCount
from lightning_fed.strategies.fedopt import FedOpt
from lightning_fed.strategies.fedprox import FedProx, ProximalCorrection, proximal_term
from lightning_fed.strategies.fedyogi import FedYogi
from lightning_fed.strategies.median import CoordinateMedian
from lightning_fed.strategies.registry import available_strategies, load_strategy_plugins
from lightning_fed.strategies.scaffold import ControlVariateCorrection, Scaffold
from lightning_fed.strategies.trimmed_mean import TrimmedMean

__all__ = [
    "AggregationError",
    "ClientUpdate",
    "ControlVariateCorrection",
    "CoordinateMedian",
    "FedAdagrad",
    "FedAMP",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedNova",
    "FedOpt",
    "FedProx",
    "FedYogi",
    "LocalCorrection",
    "ProximalCorrection",
    "Scaffold",
    "StepCount",
    "Strategy",
    "TrimmedMean",
    "available_strategies",
    "check_update",
    "load_strategy_plugins",
    "proximal_term",
    "weighted_average",
]

from lightning_fed.strategies.fedbiscuit import FedBiscuit, balanced_assignment, eq6_update, majority_vote  # noqa: E402

__all__ += ["FedBiscuit", "balanced_assignment", "eq6_update", "majority_vote"]

from lightning_fed.strategies.flexlora import FlexLoRA  # noqa: E402
from lightning_fed.strategies.flora import FLoRA  # noqa: E402
from lightning_fed.strategies.heterogeneous_rank import HeterogeneousRankLoRA  # noqa: E402
from lightning_fed.strategies.hetlora import HetLoRA  # noqa: E402

__all__ += ["FLoRA", "FlexLoRA", "HetLoRA", "HeterogeneousRankLoRA"]

from lightning_fed.strategies.fedbuff import FedBuff, staleness_weight  # noqa: E402

__all__ += ["FedBuff", "staleness_weight"]
