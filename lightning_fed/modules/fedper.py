"""FedPer (Arivazhagan et al., 2019, "Federated Learning with Personalization Layers",
arXiv:1912.00818) with the DPO objective, on LoRA.

The base layers are shared, the personalization layers stay on the client: here the LoRA
adapters of the first ``shared_layers`` transformer blocks travel, the LoRA adapters of the
blocks above and a personal LM head (an untied copy of the backbone's) stay. FedPDPO's
App. D.3 setting is ``shared_layers: 2`` on DistilGPT2's 6 blocks.
"""

from __future__ import annotations

import re
from typing import Any

from lightning_fed.modules.lora import is_adapter_param
from lightning_fed.modules.personal_head import PersonalHeadDPO
from lightning_fed.option_rules import FEDPER_OWN, check

# ``transformer.h.3.`` (GPT-2), ``model.layers.3.`` (Llama family), ``layer.3``/``blocks.3``.
_LAYER = re.compile(r"\.(?:h|layers|layer|blocks|block)\.(\d+)\.")


def layer_index(name: str) -> int | None:
    """The transformer block a parameter name belongs to, or ``None`` (embeddings, heads)."""
    match = _LAYER.search(name)
    return int(match.group(1)) if match else None


class FedPerModule(PersonalHeadDPO):
    """DPO with shared lower LoRA layers, personal upper LoRA layers and a personal LM head.

    Args:
        shared_layers: Number of lower transformer blocks whose LoRA is shared (>= 1).
        **kwargs: See :class:`~lightning_fed.modules.personal_head.PersonalHeadDPO`.
    """

    def __init__(self, *args: Any, shared_layers: int = 2, **kwargs: Any) -> None:
        check(FEDPER_OWN, shared_layers=shared_layers)
        super().__init__(*args, **kwargs)
        self.shared_layers = shared_layers
        blocks = sorted({layer_index(n) for n, _ in self.named_parameters() if is_adapter_param(n)} - {None})
        if not blocks or blocks[-1] < shared_layers:
            raise ValueError(
                f"model.shared_layers={shared_layers} leaves no personal layer: LoRA is on blocks {blocks}"
            )

    def is_personal(self, name: str) -> bool:
        if is_adapter_param(name):
            index = layer_index(name)  # FedPer's split: base layers shared, upper layers personal
            return index is not None and index >= self.shared_layers
        return super().is_personal(name)  # the personal LM head
