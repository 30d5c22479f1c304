"""``lightning-fed plan`` refuses every privacy budget ``fit`` refuses, in ``fit``'s line (issue 41).

On 3df2116 ``plan`` printed a plan (exit 0) for a budget ``fit`` refuses before anything is written:
a client-level ``federation.privacy.target_epsilon`` no noise multiplier reaches, a
``model.dp_sgd.target_epsilon`` below the RDP floor. Both subcommands now ask the same function
(:func:`lightning_fed.federation.early_check.precheck_noise`), so the lines are compared, not copied.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import ROOT, lightning_fed

BUDGETS = {
    "client_level": (
        "feddpo_dp",
        "federation:\n  privacy: {target_epsilon: 0.05}\n",
        "federation.privacy.target_epsilon=0.05 (config 'budget.yaml') with federation.privacy.delta=1e-05 (default)"
        " cannot be reached over federation.rounds=10 (config '{feddpo_dp}') at federation.sampling_rate=0.25 (config"
        " '{feddpo_dp}') by any noise multiplier (it would need one above the cap of 100; the smallest epsilon"
        " reachable under it is 0.1048)",
    ),
    "dp_sgd_below_the_floor": (
        "fedit_dpsgd",
        "model:\n  init_args:\n    dp_sgd: {target_epsilon: 0.0001}\n",
        "model.dp_sgd.target_epsilon=0.0001 (config 'budget.yaml') with federation.privacy.delta=1e-05 (default)"
        " cannot be reached by any noise"
        " multiplier: Opacus' RDP accountant gives no mechanism an epsilon below 0.1029 at this delta",
    ),
}


@pytest.mark.parametrize(("config", "budget", "start"), list(BUDGETS.values()), ids=list(BUDGETS))
def test_plan_refuses_the_budget_fit_refuses_with_its_line(tmp_path, config, budget, start):
    (tmp_path / "budget.yaml").write_text(budget)
    args = ["--config", config, "--config", "budget.yaml"]
    plan, fit = lightning_fed("plan", *args, cwd=tmp_path), lightning_fed("fit", *args, cwd=tmp_path)
    start = start.format(feddpo_dp=ROOT / "lightning_fed" / "configs" / "feddpo_dp.yaml")
    assert fit.returncode == 2 and fit.stderr.startswith(f"error: {start}"), fit.stderr
    assert (plan.returncode, plan.stdout, plan.stderr) == (2, "", fit.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["budget.yaml"]
