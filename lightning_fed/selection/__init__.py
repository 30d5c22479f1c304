"""Coreset selection for federated instruction tuning: FedHDS, FedHDS-Turbo and baselines.

Each method is a :class:`~lightning_fed.federation.RoundHook` (pass it as
``federation.hooks``) that picks every sampled client's training subset before the round.
"""

from lightning_fed.selection.baselines import CentralizedCoreset, GlobalSelect, PerplexitySelection, RandomSelection
from lightning_fed.selection.clustering import Groups, inter_client_selection, intra_client_groups, nearest_members
from lightning_fed.selection.coreset import CoresetSelection, Selection
from lightning_fed.selection.features import ProxyEncoder, layer_features
from lightning_fed.selection.fusion import SharedFrame, fuse
from lightning_fed.selection.hds import HierarchicalDataSelection
from lightning_fed.selection.privacy import gaussian_sigma, privatize_centroids

__all__ = [
    "CentralizedCoreset",
    "CoresetSelection",
    "GlobalSelect",
    "Groups",
    "HierarchicalDataSelection",
    "PerplexitySelection",
    "ProxyEncoder",
    "RandomSelection",
    "Selection",
    "SharedFrame",
    "fuse",
    "gaussian_sigma",
    "inter_client_selection",
    "intra_client_groups",
    "layer_features",
    "nearest_members",
    "privatize_centroids",
]
