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
from tests.helpers.cli import ROOT, lightning_fed

FEDDPO_DP = str(ROOT / "lightning_fed" / "configs" / "feddpo_dp.yaml")
TINY = str(ROOT / "lightning_fed" / "configs" / "tiny.yaml")
LARGEST = (
    "federation.privacy.target_epsilon={value} (the command line) with federation.privacy.delta=1e-05 (default) is"
    f" above the largest budget calibrated over federation.rounds=10 (config {FEDDPO_DP!r}) at"
    f" federation.sampling_rate=0.25 (config {FEDDPO_DP!r}): 510.6, the epsilon of the smallest noise multiplier"
    " calibrated to (0.1); lower federation.privacy.target_epsilon to at most 510.6, or give"
    " federation.privacy.noise_multiplier instead"
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


DP_SGD = (
    "model:\n  class_path: lightning_fed.privacy.DPDPOModule\n  init_args:\n    dp_sgd: {{target_epsilon: {value}}}\n"
)
IN_TINY = f"(config {TINY!r})"
SPAN = (
    f"over 15 local steps (federation.rounds=3 {IN_TINY} x federation.local_steps=5 {IN_TINY}) at sample rate 0.25"
    f" (data.batch_size=4 {IN_TINY} of a client of 16+ examples)"
)
"""Each value a DP-SGD client's budget is accounted over, followed by its file (red team 15 M8)."""
RUN_LINES = {
    "above_the_largest": (
        "1.0e+300",
        "model.dp_sgd.target_epsilon=1e+300 (config 'dp.yaml') with federation.privacy.delta=1e-05 (default) is above"
        f" the largest budget calibrated {SPAN}: 710.1, the epsilon of the"
        " smallest noise multiplier calibrated to (0.1); lower model.dp_sgd.target_epsilon to at most 710.1, or give"
        " model.dp_sgd.noise_multiplier instead",
    ),
    "unreachable": (
        "0.104",
        "model.dp_sgd.target_epsilon=0.104 (config 'dp.yaml') with federation.privacy.delta=1e-05 (default) cannot be"
        f" reached {SPAN} by any noise multiplier (it would need one above"
        " the cap of 100; the smallest epsilon reachable under it is 0.1058); raise model.dp_sgd.target_epsilon or"
        " federation.privacy.delta, or lower federation.rounds, federation.local_steps (local_epochs) or"
        " data.batch_size",
    ),
}


@pytest.mark.parametrize(("value", "line"), list(RUN_LINES.values()), ids=list(RUN_LINES))
def test_dp_sgd_s_budget_refused_once_the_data_is_read_names_its_config_file(tmp_path, value, line):
    """Issue 41, M11: on 08c1cba these lines named no file. The DP-SGD budget depends on the clients' sample rates
    and local steps, known once the data is read (Lightning imported, the model built: ~10 s of CPU, which is why
    this test runs two full CLI starts): the line is fit's, each value followed by the file that set it (red team
    15 M8: on f6ad729 the budget's file alone, as a prefix)."""
    (tmp_path / "dp.yaml").write_text(DP_SGD.format(value=value))
    proc = lightning_fed("fit", "--config", "tiny", "--config", "dp.yaml", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dp.yaml"]


@pytest.mark.parametrize(("value", "line"), list(RUN_LINES.values()), ids=list(RUN_LINES))
def test_plan_refuses_the_dp_sgd_budget_fit_refuses_in_fit_s_line(tmp_path, value, line):
    """Issue 41: ``plan`` printed a plan (exit 0) for a ``model.dp_sgd.target_epsilon`` that ``fit`` refuses once it
    has read the data. ``plan`` now sets the data up (the backbone's tokenizer, no weight) and calibrates every
    client's ``z`` with fit's own ``ExampleBudget.calibrate``: fit's line, naming the file. Seen failing on 1ce1023
    (exit 0, the plan printed)."""
    (tmp_path / "dp.yaml").write_text(DP_SGD.format(value=value))
    proc = lightning_fed("plan", "--config", "tiny", "--config", "dp.yaml", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dp.yaml"]
