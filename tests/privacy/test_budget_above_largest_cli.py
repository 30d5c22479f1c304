"""A budget so large that its noise would be negligible gets one line at once (issue 41).

On 3df2116 ``lightning-fed fit --config feddpo_dp --federation.privacy.target_epsilon=1e300`` spun in
Opacus' ``get_noise_multiplier`` (its bisection halves ``z`` until it underflows to 0, whose epsilon is
infinite, and never ends): killed after 60 s of wall time, 33 s of CPU, no line. A budget above the
epsilon of :data:`~lightning_fed.noise_calibration.MIN_NOISE_MULTIPLIER` is now refused before Opacus'
search, naming that largest budget (docs/privacy.md).
"""

from __future__ import annotations

import pytest

from lightning_fed.errors import UserError
from tests.helpers.cli import lightning_fed

LARGEST = (
    "federation.privacy.target_epsilon={value} with federation.privacy.delta=1e-05 is above the largest budget"
    " calibrated over 10 rounds at sample rate 0.25: 510.6, the epsilon of the smallest noise multiplier calibrated"
    " to (0.1); lower federation.privacy.target_epsilon to at most 510.6, or give federation.privacy.noise_multiplier"
    " instead"
)


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
@pytest.mark.parametrize(("given", "shown"), [("1e300", "1e+300"), ("600", "600")])
def test_a_budget_above_the_largest_calibrated_is_one_line_at_once(tmp_path, given, shown, accountant):
    # the time-out only stops the endless search of 3df2116; the refusal takes seconds
    proc = lightning_fed(
        "fit",
        "--config",
        "feddpo_dp",
        f"--federation.privacy.target_epsilon={given}",
        f"--federation.privacy.accountant={accountant}",
        cwd=tmp_path,
        timeout=300,
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {LARGEST.format(value=shown)}\n")
    assert list(tmp_path.iterdir()) == []


def test_dp_sgd_s_budget_above_the_largest_is_refused_by_the_run_s_calibration():
    """``model.dp_sgd.target_epsilon`` is calibrated once the clients' data is read (their rates): the same
    bound, the same line (``fit --config fedit_dpsgd --model.init_args.dp_sgd.target_epsilon=1e300`` says it
    after the data is read, nothing written)."""
    from lightning_fed.privacy.accountant import calibrate_noise_multiplier

    with pytest.raises(UserError) as err:
        calibrate_noise_multiplier(1e300, 1e-5, 0.25, 100, unit="local steps", option="model.dp_sgd.target_epsilon")
    assert str(err.value) == (
        "model.dp_sgd.target_epsilon=1e+300 with federation.privacy.delta=1e-05 is above the largest budget calibrated"
        " over 100 local steps at sample rate 0.25: 4100, the epsilon of the smallest noise multiplier calibrated to"
        " (0.1); lower model.dp_sgd.target_epsilon to at most 4100, or give model.dp_sgd.noise_multiplier instead"
    )
