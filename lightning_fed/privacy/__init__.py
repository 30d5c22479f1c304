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
from lightning_fed.privacy.example_budget import ExampleBudget
from lightning_fed.privacy.report import ChannelReport, PrivacyReport, bucket_count, redact_client_metrics

__all__ = [
    "AdaptiveClipping",
    "ChannelReport",
    "ClientLevelDP",
    "DPDPOModule",
    "DPSFTModule",
    "DPSGDSettings",
    "ExampleBudget",
    "PrivacyAccountant",
    "PrivacyConfig",
    "PrivacyReport",
    "accounted_sample_rate",
    "bucket_count",
    "calibrate_noise_multiplier",
    "clip_to_norm",
    "example_level_accountant",
    "global_norm",
    "per_example_clip_factors",
    "redact_client_metrics",
    "update_noise_multiplier",
]
