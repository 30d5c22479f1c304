"""LightningModules: one local objective per file."""

from lightning_fed.modules.backbone import BackboneConfig, load_backbone, load_tokenizer
from lightning_fed.modules.base import FederatedModule
from lightning_fed.modules.dpo import DPOModule
from lightning_fed.modules.fedper import FedPerModule
from lightning_fed.modules.fedrep import FedRepModule
from lightning_fed.modules.lora import LoraSettings, apply_lora, is_adapter_param
from lightning_fed.modules.pdpo import PDPOModule
from lightning_fed.modules.perfedavg import PerFedAvgModule
from lightning_fed.modules.personal_head import PersonalHeadDPO
from lightning_fed.modules.sft import SFTModule

__all__ = [
    "BackboneConfig",
    "DPOModule",
    "FedPerModule",
    "FedRepModule",
    "FederatedModule",
    "LoraSettings",
    "PDPOModule",
    "PerFedAvgModule",
    "PersonalHeadDPO",
    "SFTModule",
    "apply_lora",
    "is_adapter_param",
    "load_backbone",
    "load_tokenizer",
]

from lightning_fed.modules.selector import BinarySelectorModule  # noqa: E402

__all__ += ["BinarySelectorModule"]

from lightning_fed.modules.selector_source import SelectorSource, load_selector  # noqa: E402

__all__ += ["SelectorSource", "load_selector"]
