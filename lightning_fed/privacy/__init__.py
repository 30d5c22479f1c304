"""Differential privacy: client-level DP around the server strategies, example-level DP-SGD
inside a client, the accountants (Opacus), and the run's per-channel privacy report.

See ``docs/privacy.md`` for what is protected, from whom, and what is not.
"""

from lightning_fed.privacy.adaptive_clipping import AdaptiveClipping, update_noise_multiplier
from lightning_fed.privacy.client_dp import ClientLevelDP
from lightning_fed.privacy.clipping import clip_to_norm, global_norm, per_example_clip_factors

__all__ = [
    "AdaptiveClipping",
    "ClientLevelDP",
    "clip_to_norm",
    "global_norm",
    "per_example_clip_factors",
    "update_noise_multiplier",
]
