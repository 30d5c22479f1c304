"""SecureAggregation around a strategy that needs more than the sum (FedBuff, Scaffold...) is refused in
one line naming both options and the file (issue 41).

On 3df2116 ``fit --config feddpo_fedbuff --config secagg_fedbuff.yaml`` (or ``secagg`` with FedBuff inside
its ClientLevelDP) said ``error: config 'secagg_fedbuff.yaml': SecureAggregation: strategy FedBuff cannot
run on a secure sum (...)``: no option path.
"""

from __future__ import annotations

import pytest

from lightning_fed.wrapper_rules import secure_sum_problem
from tests.helpers.cli import lightning_fed_without_torch

SECAGG = "lightning_fed.deploy.secure_aggregation.SecureAggregation"
FEDBUFF = "{class_path: lightning_fed.strategies.FedBuff, init_args: {buffer_size: 3}}"
SUPPORTED = (
    "the server gets only the sum of the updates (supported: FedAvg, FedProx, FedAvgM, FedAdagrad, FedYogi,"
    " FedAdam, optionally inside ClientLevelDP)"
)
CASES = {
    "fedbuff": (
        "feddpo_fedbuff",
        f"{{class_path: {SECAGG}, init_args: {{strategy: {FEDBUFF}}}}}",
        f"federation.strategy.strategy=FedBuff cannot run under federation.strategy=SecureAggregation: {SUPPORTED}",
    ),
    "fedbuff_inside_client_dp": (
        "secagg",
        f"{{class_path: {SECAGG}, init_args: {{strategy: {{class_path: lightning_fed.privacy.ClientLevelDP,"
        f" init_args: {{strategy: {FEDBUFF}}}}}}}}}",
        "federation.strategy.strategy.strategy=FedBuff cannot run under federation.strategy=SecureAggregation:"
        f" {SUPPORTED}",
    ),
}


@pytest.mark.parametrize(("config", "strategy", "line"), list(CASES.values()), ids=list(CASES))
def test_a_strategy_a_secure_sum_cannot_run_is_named_by_its_option(tmp_path, config, strategy, line):
    cwd, override = tmp_path / "cwd", tmp_path / "secagg_fedbuff.yaml"
    cwd.mkdir()
    override.write_text(f"federation:\n  strategy: {strategy}\n")
    proc = lightning_fed_without_torch(
        "fit", "--config", config, "--config", str(override), cwd=cwd, hook=tmp_path / "h"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(override)!r}: {line}\n")
    assert list(cwd.iterdir()) == []


def test_the_class_says_the_precheck_s_line():
    """The run's own refusal (a class of the user's the precheck does not follow) is the same line."""
    from lightning_fed.deploy.secure_aggregation import SecureAggregation
    from lightning_fed.privacy import ClientLevelDP
    from lightning_fed.strategies import FedBuff

    with pytest.raises(ValueError, match="^federation.strategy.strategy.strategy=FedBuff cannot run") as err:
        SecureAggregation(ClientLevelDP(FedBuff(buffer_size=3)))
    assert str(err.value) == secure_sum_problem("FedBuff", inside_client_dp=True)
