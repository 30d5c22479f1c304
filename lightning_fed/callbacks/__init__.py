"""Lightning callbacks: the federated loop that drives the rounds, its progress bar and LR schedule."""

from lightning_fed.callbacks.federated_loop import FederatedLoop
from lightning_fed.callbacks.lr_schedule import RoundLRSchedule
from lightning_fed.callbacks.progress import FederatedProgressBar

__all__ = ["FederatedLoop", "FederatedProgressBar", "RoundLRSchedule"]
