"""The strategy wrappers' options (ClientLevelDP, SecureAggregation) refused before torch (issue 41,
item 3): ``lightning-fed fit`` as a process whose ``import torch`` fails, exit 2 with the line the
class raises (:mod:`lightning_fed.wrapper_rules`, called by the classes and the precheck alike),
nothing written. On baaf8e7 each was refused only after 10-15 s of imports (the child here then
reached ``import torch``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

DP = "lightning_fed.privacy.ClientLevelDP"
SECAGG = "lightning_fed.deploy.secure_aggregation.SecureAggregation"

# name -> (federation.strategy as YAML flow text, the class's line)
CASES = {
    "dp_negative_noise": (
        f"{{class_path: {DP}, init_args: {{noise_multiplier: -1, strategy: FedAvg}}}}",
        "federation.strategy.noise_multiplier must be >= 0, got -1.0",
    ),
    "dp_zero_clip_and_control_scale": (
        "{class_path: ClientLevelDP, init_args: {clip_norm: 0, control_scale: -2, strategy: FedAvg}}",
        "federation.strategy.clip_norm must be > 0, got 0.0; federation.strategy.control_scale must be > 0, got -2.0",
    ),
    "dp_around_fednova": (
        f"{{class_path: {DP}, init_args: {{strategy: {{class_path: lightning_fed.strategies.FedNova}}}}}}",
        "ClientLevelDP: strategy FedNova cannot be wrapped: it normalises each client's update by that client's"
        " own step count",
    ),
    "dp_wrapped_strategy_rule": (
        f"{{class_path: {DP}, init_args: {{strategy: {{class_path: FedAdam, init_args: {{tau: -1}}}}}}}}",
        "federation.strategy.strategy.tau must be > 0, got -1.0",  # where it is (red team 8 row 12)
    ),
    "secagg_clipping_range": (
        f"{{class_path: {SECAGG}, init_args: {{clipping_range: -1, strategy: FedAvg}}}}",
        "federation.strategy.clipping_range must be > 0, got -1.0",
    ),
    "secagg_num_shares_int": (
        f"{{class_path: {SECAGG}, init_args: {{num_shares: 2, strategy: FedAvg}}}}",
        "federation.strategy.num_shares must be an int > 2 or a fraction in (0, 1], got 2",
    ),
    "secagg_num_shares_word": (
        f"{{class_path: {SECAGG}, init_args: {{num_shares: abc, strategy: FedAvg}}}}",
        "federation.strategy.num_shares must be an int > 2 or a fraction in (0, 1], got 'abc'",
    ),
    "secagg_quantization_float": (
        f"{{class_path: {SECAGG}, init_args: {{quantization_range: 1.5, strategy: FedAvg}}}}",
        "federation.strategy.quantization_range must be an int > 0, got 1.5",
    ),
    "secagg_modulus": (
        f"{{class_path: {SECAGG}, init_args: {{modulus_range: 1000, quantization_range: 10, strategy: FedAvg}}}}",
        "federation.strategy.modulus_range must be a power of 2 in (quantization_range, 2**32], got 1000"
        " (Flower samples masks below it as int64)",
    ),
    "secagg_around_scaffold": (
        f"{{class_path: {SECAGG}, init_args: {{strategy: Scaffold}}}}",
        "federation.strategy.strategy=Scaffold cannot run under federation.strategy=SecureAggregation: the server"
        " gets only the sum of the updates (supported: FedAvg, FedProx, FedAvgM, FedAdagrad, FedYogi, FedAdam,"
        " optionally inside ClientLevelDP)",
    ),
    "dp_inside_secagg_first": (
        f"{{class_path: {SECAGG}, init_args: {{num_shares: 2, strategy: {{class_path: {DP},"
        " init_args: {noise_multiplier: -1, strategy: FedAvg}}}}",
        "federation.strategy.strategy.noise_multiplier must be >= 0, got -1.0",  # where it is
    ),
}


def _run(tmp_path: Path, strategy: str):
    cwd, config = tmp_path / "cwd", tmp_path / "strategy.yaml"
    cwd.mkdir(exist_ok=True)
    config.write_text(f"federation:\n  strategy: {strategy}\n")
    proc = lightning_fed_without_torch("fit", "--config", "tiny", "--config", str(config), cwd=cwd, hook=tmp_path / "h")
    return proc, cwd


@pytest.mark.parametrize(("strategy", "line"), list(CASES.values()), ids=list(CASES))
def test_a_wrapper_option_is_refused_before_torch_with_the_class_s_line(tmp_path, strategy, line):
    proc, cwd = _run(tmp_path, strategy)
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(tmp_path / 'strategy.yaml')!r}: {line}\n")
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize(
    "strategy",
    [
        f"{{class_path: {DP}, init_args: {{noise_multiplier: 1.0, clip_norm: 0.05, strategy: FedAvg}}}}",
        f"{{class_path: {DP}, init_args: {{noise_multiplier: '1e-3', strategy: FedAvg}}}}",  # the parser's float
        # count_stddev 0 beside no noise at all (beside noise: wrapper_rules.count_noise_problem)
        f"{{class_path: {DP}, init_args: {{strategy: FedAvg, noise_multiplier: 0,"
        f" adaptive: {{target_quantile: 1, count_stddev: 0}}}}}}",
        f"{{class_path: {SECAGG}, init_args: {{num_shares: 3, reconstruction_threshold: 2, strategy: FedProx}}}}",
    ],
)
def test_accepted_wrapper_options_go_on_to_the_live_parser(tmp_path, strategy):
    proc, _ = _run(tmp_path, strategy)
    assert REACHED_TORCH in proc.stderr, proc.stderr


def test_the_classes_refuse_with_the_same_lines():
    """The classes call the same functions (the lines the precheck gives are theirs)."""
    from lightning_fed.deploy.secure_aggregation import SecureAggregation
    from lightning_fed.privacy import ClientLevelDP
    from lightning_fed.strategies import FedAvg

    with pytest.raises(ValueError, match=r"^federation.strategy.noise_multiplier must be >= 0, got -1.0$"):
        ClientLevelDP(FedAvg(), noise_multiplier=-1.0)
    with pytest.raises(ValueError, match=r"^federation.strategy.clipping_range must be > 0, got -1.0$"):
        SecureAggregation(FedAvg(), clipping_range=-1.0)
    from lightning_fed.privacy import AdaptiveClipping

    with pytest.raises(
        ValueError, match=r"^federation.strategy.adaptive.target_quantile must be in \[0, 1\], got 1.5$"
    ):
        AdaptiveClipping(target_quantile=1.5)  # ClientLevelDP's adaptive (lightning_fed/wrapper_rules.py)
