"""Differential privacy: client-level DP around the server strategies, example-level DP-SGD
inside a client, the accountants (Opacus), and the run's per-channel privacy report.

See ``docs/privacy.md`` for what is protected, from whom, and what is not.
"""

from lightning_fed.privacy.accountant import PrivacyAccountant, accounted_sample_rate, calibrate_noise_multiplier
from lightning_fed.privacy.adaptive_clipping import AdaptiveClipping, update_noise_multiplier
from lightning_fed.privacy.client_dp import ClientLevelDP
from lightning_fed.privacy.clipping import clip_to_norm, global_norm, per_example_clip_factors
from lightning_fed.privacy.config import PrivacyConfig
from lightning_fed.privacy.dp_sgd import DPDPOModule, DPSFTModule, DPSGDSettings, example_level_accountant

__all__ = [
    "AdaptiveClipping",
    "ClientLevelDP",
    "DPDPOModule",
    "DPSFTModule",
    "DPSGDSettings",
    "PrivacyAccountant",
    "PrivacyConfig",
    "accounted_sample_rate",
    "calibrate_noise_multiplier",
    "clip_to_norm",
    "example_level_accountant",
    "global_norm",
    "per_example_clip_factors",
    "update_noise_multiplier",
]
