"""Clients as they really are: different LoRA ranks, different speeds, availability and dropouts.

The aggregators for heterogeneous ranks are strategies (:class:`~lightning_fed.strategies.HetLoRA`,
:class:`~lightning_fed.strategies.FlexLoRA`, :class:`~lightning_fed.strategies.FLoRA`); this
package holds what configures the clients: which rank each trains
(:class:`RankAssignment`). See ``docs/heterogeneous_clients.md``.
"""

from lightning_fed.heterogeneity.rank_assignment import RankAssignment, alpha_for_rank

__all__ = ["RankAssignment", "alpha_for_rank"]
