"""A PEFT adapter folder's ``adapter_config.json``, checked without torch.

Its ``r`` must be a positive integer and its ``lora_alpha`` a finite number in
``(0, MAX_LORA_ALPHA]``, the bound ``fit`` puts on ``lora.alpha`` (PEFT scales the update by
``alpha / r``). Reading it needs only ``json``, so ``lightning-fed evaluate`` refuses a bad one
before torch is imported; the weights beside it are checked with torch
(:func:`lightning_fed.modules.adapter_files.check_adapter_folder`, which calls this first).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from lightning_fed.limits import MAX_LORA_ALPHA

ADAPTER_CONFIG = "adapter_config.json"


def read_adapter_config(folder: str | Path, field: str) -> dict[str, Any]:
    """The folder's adapter config, its ``r`` and ``lora_alpha`` checked.

    Args:
        folder: The PEFT adapter folder.
        field: The option that named it (``--adapter``, ``--run``, ``selector.path``).

    Raises:
        ValueError: One line naming ``field``, the file and what is wrong.
    """
    config_path = Path(folder) / ADAPTER_CONFIG
    try:
        config = json.loads(config_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{field} {str(config_path)!r}: not a readable JSON adapter config ({err})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{field} {str(config_path)!r}: holds a {type(config).__name__}, expected a JSON object")
    r, alpha = config.get("r"), config.get("lora_alpha", 8)
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise ValueError(f"{field} {str(config_path)!r}: 'r' must be a positive integer, got {r!r}")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha):
        raise ValueError(f"{field} {str(config_path)!r}: 'lora_alpha' must be a finite number, got {alpha!r}")
    if not 0 < alpha <= MAX_LORA_ALPHA:  # the bound fit puts on lora.alpha (PEFT scales by alpha / r)
        raise ValueError(f"{field} {str(config_path)!r}: 'lora_alpha' must be in (0, {MAX_LORA_ALPHA}], got {alpha!r}")
    return config
