"""LightningModules: one local objective per file."""

from lightning_fed.modules.backbone import BackboneConfig, load_backbone, load_tokenizer
from lightning_fed.modules.base import FederatedModule
from lightning_fed.modules.dpo import DPOModule
from lightning_fed.modules.fedbiot import OffsiteModule, adapter_proximal_term
from lightning_fed.modules.fedper import FedPerModule
from lightning_fed.modules.fedrep import FedRepModule
from lightning_fed.modules.layer_extract import LayerLayout, layer_extract, offsite_layout
from lightning_fed.modules.lora import LoraSettings, apply_lora, is_adapter_param
from lightning_fed.modules.orpo import ORPOModule
from lightning_fed.modules.pdpo import PDPOModule
from lightning_fed.modules.perfedavg import PerFedAvgModule
from lightning_fed.modules.personal_head import PersonalHeadDPO
from lightning_fed.modules.selector import BinarySelectorModule
from lightning_fed.modules.selector_source import SelectorSource, load_selector
from lightning_fed.modules.sft import SFTModule
from lightning_fed.modules.simpo import SimPOModule

__all__ = [
    "BackboneConfig",
    "BinarySelectorModule",
    "DPOModule",
    "FedPerModule",
    "FedRepModule",
    "FederatedModule",
    "LayerLayout",
    "LoraSettings",
    "ORPOModule",
    "OffsiteModule",
    "PDPOModule",
    "PerFedAvgModule",
    "PersonalHeadDPO",
    "SFTModule",
    "SelectorSource",
    "SimPOModule",
    "adapter_proximal_term",
    "apply_lora",
    "is_adapter_param",
    "layer_extract",
    "load_backbone",
    "load_selector",
    "load_tokenizer",
    "offsite_layout",
]
