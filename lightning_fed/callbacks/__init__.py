"""The federated round engine and round-level method hooks."""

from lightning_fed.callbacks.emulator_alignment import EmulatorAlignment
from lightning_fed.callbacks.federated_loop import FederatedLoop
from lightning_fed.callbacks.hooks import RoundHook
from lightning_fed.callbacks.lr_schedule import RoundLRSchedule
from lightning_fed.callbacks.progress import FederatedProgressBar

__all__ = ["EmulatorAlignment", "FederatedLoop", "FederatedProgressBar", "RoundHook", "RoundLRSchedule"]
