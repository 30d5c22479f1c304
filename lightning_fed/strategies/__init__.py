"""Server strategies: pure aggregation rules over named tensors.

``STRATEGIES`` maps the names used in configs and on the command line to the classes.
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
from lightning_fed.strategies.fedopt import FedOpt
from lightning_fed.strategies.fedprox import FedProx, ProximalCorrection, proximal_term
from lightning_fed.strategies.fedyogi import FedYogi
from lightning_fed.strategies.median import CoordinateMedian
from lightning_fed.strategies.scaffold import ControlVariateCorrection, Scaffold
from lightning_fed.strategies.trimmed_mean import TrimmedMean

STRATEGIES: dict[str, type[Strategy]] = {
    "fedavg": FedAvg,
    "fedprox": FedProx,
    "scaffold": Scaffold,
    "fedavgm": FedAvgM,
    "fedadagrad": FedAdagrad,
    "fedyogi": FedYogi,
    "fedadam": FedAdam,
    "fedamp": FedAMP,
    "median": CoordinateMedian,
    "trimmed_mean": TrimmedMean,
}

__all__ = [
    "STRATEGIES",
    "AggregationError",
    "ClientUpdate",
    "ControlVariateCorrection",
    "CoordinateMedian",
    "FedAdagrad",
    "FedAMP",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedOpt",
    "FedProx",
    "FedYogi",
    "LocalCorrection",
    "ProximalCorrection",
    "Scaffold",
    "Strategy",
    "TrimmedMean",
    "check_update",
    "proximal_term",
    "weighted_average",
]

from lightning_fed.strategies.fedbiscuit import FedBiscuit, balanced_assignment, eq6_update, majority_vote  # noqa: E402

STRATEGIES["fedbiscuit"] = FedBiscuit
__all__ += ["FedBiscuit", "balanced_assignment", "eq6_update", "majority_vote"]
