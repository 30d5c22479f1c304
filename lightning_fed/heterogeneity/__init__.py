"""Clients as they really are: different LoRA ranks, different speeds, availability and dropouts.

The aggregators for heterogeneous ranks are strategies (:class:`~lightning_fed.strategies.HetLoRA`,
:class:`~lightning_fed.strategies.FlexLoRA`, :class:`~lightning_fed.strategies.FLoRA`); this
package holds what configures the clients: which rank each trains
(:class:`RankAssignment`), how fast and reliable each is (:class:`ClientProfile`), and the
virtual clock that turns those into who reports when (:class:`SyncRoundSimulator`,
:class:`AsyncRoundSimulator`). See ``docs/heterogeneous_clients.md``.
"""

from lightning_fed.heterogeneity.async_rounds import AsyncArrivals
from lightning_fed.heterogeneity.client_ranks import ClientRanks
from lightning_fed.heterogeneity.flora_merge import FLoRAMerge
from lightning_fed.heterogeneity.rank_assignment import RankAssignment, alpha_for_rank
from lightning_fed.heterogeneity.system_profiles import (
    ClientProfile,
    SystemProfile,
    load_trace,
    profiles_from_distribution,
)
from lightning_fed.heterogeneity.system_round import SystemHeterogeneity
from lightning_fed.heterogeneity.virtual_clock import (
    Arrival,
    AsyncRoundSimulator,
    Report,
    RoundOutcome,
    SyncRoundSimulator,
)

__all__ = [
    "Arrival",
    "AsyncArrivals",
    "AsyncRoundSimulator",
    "ClientProfile",
    "ClientRanks",
    "FLoRAMerge",
    "RankAssignment",
    "Report",
    "RoundOutcome",
    "SyncRoundSimulator",
    "SystemHeterogeneity",
    "SystemProfile",
    "alpha_for_rank",
    "load_trace",
    "profiles_from_distribution",
]
