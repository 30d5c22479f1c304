"""``model.dp_sgd``'s rules (:class:`~lightning_fed.privacy.dp_sgd.DPSGDSettings`), declared once
without torch (issue 41: a config error before torch is imported).

The dataclass raises with :func:`dp_sgd_problems` in its ``__post_init__``; the precheck
(:func:`dp_sgd_problem`, from :mod:`lightning_fed.config_values`) applies the same function to the
merged config's ``model.dp_sgd`` of the package's DP-SGD modules, after refusing a key the
dataclass has no field for (its fields read from the source, the closest named). Before, both were
refused after 11-13 s of imports (``Option 'clip_nrm' is not accepted``, ``clip_norm must be a
number > 0``). Imports nothing heavy.
"""

from __future__ import annotations

import math
from typing import Any

from lightning_fed.class_parameters import class_chain, fields
from lightning_fed.option_rules import PACKAGES
from lightning_fed.value_rules import unknown_key
from lightning_fed.yaml_reading import numbers_read

SETTINGS = ("lightning_fed.privacy.dp_sgd", "DPSGDSettings")
"""Where ``model.dp_sgd``'s dataclass is defined."""
MODULES = frozenset({"ExampleLevelDP"})
"""The base of the package's modules that take ``dp_sgd`` (DPDPOModule, DPSFTModule)."""


def positive_number(value: Any) -> bool:
    """A finite number > 0 (not a bool, not a string, not NaN or infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def dp_sgd_problems(
    clip_norm: Any = 1.0,
    noise_multiplier: Any = None,
    target_epsilon: Any = None,
    expected_batch_size: Any = None,
    ffa_lora: Any = False,
    seed: Any = None,
) -> list[str]:
    """Every refused value of ``model.dp_sgd``, each one line, in the dataclass's field order (the
    defaults are the dataclass's: ``tests/test_dp_sgd_rules.py``)."""
    problems = []
    if not positive_number(clip_norm):
        problems.append(f"model.dp_sgd.clip_norm must be a number > 0, got {clip_norm!r}")
    if (noise_multiplier is None) == (target_epsilon is None):
        problems.append(
            "give exactly one of model.dp_sgd.noise_multiplier and model.dp_sgd.target_epsilon, got"
            f" noise_multiplier={noise_multiplier!r}, target_epsilon={target_epsilon!r}"
        )
    z = noise_multiplier
    if z is not None and not (positive_number(z) or (z == 0 and not isinstance(z, bool))):  # False == 0
        problems.append(f"model.dp_sgd.noise_multiplier must be a number >= 0, got {noise_multiplier!r}")
    if target_epsilon is not None and not positive_number(target_epsilon):
        problems.append(f"model.dp_sgd.target_epsilon must be a number > 0, got {target_epsilon!r}")
    if expected_batch_size is not None and not (
        isinstance(expected_batch_size, int) and not isinstance(expected_batch_size, bool) and expected_batch_size >= 1
    ):
        problems.append(f"model.dp_sgd.expected_batch_size must be an integer >= 1, got {expected_batch_size!r}")
    if not isinstance(ffa_lora, bool):
        problems.append(f"model.dp_sgd.ffa_lora must be true or false, got {ffa_lora!r}")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        problems.append(f"model.dp_sgd.seed must be an integer, got {seed!r}")
    return problems


def dp_sgd_problem(model: Any) -> str | None:
    """The line refusing the merged ``model:``'s ``dp_sgd`` (``{"class_path", "init_args"}`` of one of
    the package's DP-SGD modules), or ``None``."""
    if not isinstance(model, dict) or not isinstance(settings := model.get("init_args", {}).get("dp_sgd"), dict):
        return None
    if not any(node.name in MODULES for _, node in class_chain(PACKAGES["model"], model["class_path"])):
        return None
    accepted = fields(*SETTINGS)
    if accepted is None:
        return None
    for key in settings:
        if str(key) not in accepted:
            return unknown_key("model.dp_sgd", SETTINGS[1], str(key), list(accepted))
    settings = numbers_read(settings)  # `target_epsilon: "0.01"` is 0.01 to the parser (red team 16 B04)
    return "; ".join(dp_sgd_problems(**{str(k): v for k, v in settings.items()})) or None
