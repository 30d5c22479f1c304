"""Method-specific round hooks (:class:`~lightning_fed.federation.RoundHook`): work that is
neither a local objective nor aggregation. FedHDS's data selection has its own package,
:mod:`lightning_fed.selection`."""

from lightning_fed.round_hooks.client_grouping import ClientGrouping
from lightning_fed.round_hooks.emulator_alignment import EmulatorAlignment

__all__ = ["ClientGrouping", "EmulatorAlignment"]
