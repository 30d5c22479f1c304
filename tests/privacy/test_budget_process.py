"""``lightning-fed fit`` with a privacy budget no run can meet: exit 2, one ``error:`` line naming
the options, before anything is written (the budget is planned before training)."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers.cli import HEAVY_IMPORTED, ROOT, lightning_fed

IN_FILE = "(config '{config}')"
SPAN = f"over federation.rounds=3 {IN_FILE} at sample rate 1 of federation.sampling=fixed_size (default)"
"""tiny's rounds, in the test's file; fixed-size sampling by default (each value named with its source: red team
15 M8)."""
UNREACHABLE = (
    f"federation.privacy.target_epsilon=0.01 {IN_FILE} with federation.privacy.delta=1e-05 {IN_FILE} cannot be"
    f" reached {SPAN} by any noise multiplier (it would need one above the cap of 100; the"
    " smallest epsilon reachable under it is 0.1123); raise"
    " federation.privacy.target_epsilon"
    " or federation.privacy.delta, lower federation.rounds, or sample fewer clients (federation.sampling: poisson,"
    " with a smaller federation.sampling_rate)"
)
"""Refused right after the precheck (lightning_fed/noise_calibration.budget_problem), naming the file: on c9c04d9
when the run was bound, two lines (the ``--debug`` hint), no file."""
ABOVE_CAP = (
    f"federation.privacy.target_epsilon=0.105 {IN_FILE} with federation.privacy.delta=1e-05 {IN_FILE} cannot be"
    f" reached {SPAN} by any noise multiplier (it would need one above the cap of 100; the"
    " smallest epsilon reachable under it is 0.1123); raise federation.privacy.target_epsilon"
    " or federation.privacy.delta, lower federation.rounds, or sample fewer clients (federation.sampling: poisson,"
    " with a smaller federation.sampling_rate)"
)
"""Just above the RDP floor (0.1029): a noise multiplier above noise_calibration.MAX_NOISE_MULTIPLIER (Opacus
calibrates z = 320 after doubling it from 20); on 628d0d2 the run calibrated it and trained (exit 0)."""
FIRST_ROUND = (
    f"federation.privacy.target_epsilon=0.5 {IN_FILE} is spent by the first round at"
    f" federation.privacy.noise_multiplier=1 {IN_FILE} (epsilon 4.73 per round with federation.privacy.delta=1e-05"
    " (default) at sample rate 1 of federation.sampling=fixed_size (default)): raise target_epsilon or noise_multiplier"
)
"""Refused when the run is bound (the server's sampler), before the Trainer writes: on f6ad729 two lines (the
``--debug`` hint) naming no file; now one line, each value followed by its source (red team 15 M8)."""


ADAPTIVE_SPLIT = (
    f"federation.strategy.adaptive.count_stddev=2 {IN_FILE} is too small for the client-level noise multiplier"
    f" 4.844 calibrated for federation.privacy.target_epsilon=1.5 {IN_FILE} with federation.privacy.delta=1e-05"
    f" {IN_FILE} {SPAN} (adaptive clipping needs 2 * count_stddev > noise_multiplier): raise count_stddev above"
    " 2.422, or lower the noise multiplier (a larger federation.privacy.target_epsilon)"
)
"""Refused with Opacus alone imported, before Lightning (lightning_fed/noise_calibration.py), in one line naming
the option and the file: on a8354b9 (red team 10's zz_cs01) when the run was bound, two lines, no option path."""


DP_SGD_UNREACHABLE = (
    f"model.dp_sgd.target_epsilon=0.01 {IN_FILE} with federation.privacy.delta=1e-05 (default) cannot be reached by"
    " any noise multiplier: Opacus' RDP accountant gives no mechanism an epsilon below 0.1029 at this delta; raise"
    " model.dp_sgd.target_epsilon above 0.1029 or federation.privacy.delta"
)
"""At or below the RDP floor of its delta: refused right after the precheck
(lightning_fed/noise_calibration.dp_sgd_budget_problem), naming the file, in one line; on 628d0d2 after the model
was built and Opacus' bisection reached its cap, two lines naming no file."""


def _client_level(cfg, privacy):
    cfg["federation"]["privacy"] = privacy
    cfg["federation"]["strategy"] = {
        "class_path": "lightning_fed.privacy.ClientLevelDP",
        "init_args": {"strategy": {"class_path": "lightning_fed.strategies.FedAvg"}},
    }


def _adaptive(cfg, privacy):
    """feddpo_dp's adaptive clip (count_stddev 2.0) with a budget that calibrates z = 4.84 >= 2 * 2."""
    _client_level(cfg, privacy)
    cfg["federation"]["strategy"]["init_args"]["adaptive"] = {"target_quantile": 0.5, "count_stddev": 2.0}


def _example_level(cfg, dp_sgd):
    cfg["model"]["class_path"] = "lightning_fed.privacy.DPDPOModule"
    cfg["model"]["init_args"]["dp_sgd"] = dp_sgd


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda cfg: _client_level(cfg, {"target_epsilon": 0.01, "delta": 1e-5}), UNREACHABLE),
        (lambda cfg: _client_level(cfg, {"target_epsilon": 0.105, "delta": 1e-5}), ABOVE_CAP),
        (lambda cfg: _client_level(cfg, {"target_epsilon": 0.5, "noise_multiplier": 1.0}), FIRST_ROUND),
        (lambda cfg: _adaptive(cfg, {"target_epsilon": 1.5, "delta": 1e-5}), ADAPTIVE_SPLIT),
        # the default delta (N = 4: min(4^-1.1 = 0.22, 1e-5)): a delta of 0.22 would "meet" any budget
        (lambda cfg: _example_level(cfg, {"clip_norm": 1.0, "target_epsilon": 0.01}), DP_SGD_UNREACHABLE),
    ],
    ids=["unreachable", "above_cap", "spent_by_round_1", "adaptive_split", "dp_sgd_unreachable"],
)
def test_an_impossible_budget_exits_2_before_writing_anything(tmp_path, edit, message):
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    edit(cfg)
    cfg["trainer"]["default_root_dir"] = str(tmp_path / "run")
    config = tmp_path / "budget.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = lightning_fed("fit", "--config", str(config))
    assert proc.returncode == 2, proc.stderr[-3000:]
    message = message.replace("{config}", str(config))
    assert proc.stderr == f"error: {message}\n"  # a UserError: one line, no --debug hint
    assert not (tmp_path / "run").exists()


def test_a_count_noise_the_calibrated_noise_leaves_no_room_for_is_refused_before_lightning(tmp_path):
    """Red team 10's zz_cs01, in its form (a second file over ``tiny``; Poisson rate 0.5 of 8 clients, 2
    rounds, epsilon 8: z = 0.7544 > 2 x 0.1): on a8354b9 refused when the run was bound (17 s of CPU), two
    lines naming no option and no file. Now with Opacus (torch) imported, not Lightning, transformers or
    PEFT (the child lists what it imported), and nothing written."""
    import os
    import sys

    from tests.helpers.cli import ENV, run_process

    strategy = {
        "class_path": "lightning_fed.privacy.ClientLevelDP",
        "init_args": {
            "strategy": {"class_path": "lightning_fed.strategies.FedAdam", "init_args": {"server_lr": 0.01}},
            "clip_norm": 0.05,
            "adaptive": {"target_quantile": 0.5, "learning_rate": 0.2, "count_stddev": 0.1},
        },
    }
    federation = {"rounds": 2, "sampling": "poisson", "sampling_rate": 0.5, "local_steps": 2}
    federation.update(privacy={"target_epsilon": 8.0}, strategy=strategy)
    change = tmp_path / "dp.yaml"
    change.write_text(yaml.safe_dump({"data": {"init_args": {"num_clients": 8}}, "federation": federation}))
    hook, cwd = tmp_path / "hook", tmp_path / "cwd"
    hook.mkdir()
    cwd.mkdir()
    (hook / "sitecustomize.py").write_text(HEAVY_IMPORTED.format(path=str(tmp_path / "heavy.txt")))
    env = {**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"}
    proc = run_process(
        [sys.executable, "-m", "lightning_fed", "fit", "--config", "tiny", "--config", str(change)], cwd=cwd, env=env
    )
    where = f"(config {str(change)!r})"
    line = (
        f"error: federation.strategy.adaptive.count_stddev=0.1 {where} is too small for the client-level noise"
        f" multiplier 0.7544 calibrated for federation.privacy.target_epsilon=8.0 {where} with federation.privacy.delta"
        f"=1e-05 (default) over federation.rounds=2 {where} at federation.sampling_rate=0.5 {where} (adaptive clipping"
        " needs 2 * count_stddev > noise_multiplier): raise count_stddev above 0.3772, or lower the noise multiplier"
        " (a larger federation.privacy.target_epsilon)\n"
    )
    assert (proc.returncode, proc.stderr) == (2, line)
    assert list(cwd.iterdir()) == []
    assert (tmp_path / "heavy.txt").read_text() == ""


def test_an_unreachable_budget_on_the_command_line_is_one_line_before_lightning(tmp_path):
    """Red team 11 row 14 (dp_imposs), in its form: ``target_epsilon=0.0001`` on the command line over a
    Poisson-sampled ClientLevelDP file. On c9c04d9 refused when the run was bound, after 52 s of CPU
    (Opacus' bisection doubling ``z`` to its cap), in two lines. Now one line (no file: the value came from
    the command line), with Opacus imported but not Lightning, transformers or PEFT, nothing written."""
    import os
    import sys

    from tests.helpers.cli import ENV, run_process

    strategy = {
        "class_path": "lightning_fed.privacy.ClientLevelDP",
        "init_args": {"strategy": {"class_path": "lightning_fed.strategies.FedAvg"}, "clip_norm": 0.05},
    }
    federation = {"rounds": 2, "sampling": "poisson", "sampling_rate": 0.5, "local_steps": 2}
    federation.update(privacy={"target_epsilon": 8.0}, strategy=strategy)
    change = tmp_path / "dp.yaml"
    change.write_text(yaml.safe_dump({"federation": federation}))
    hook, cwd = tmp_path / "hook", tmp_path / "cwd"
    hook.mkdir()
    cwd.mkdir()
    (hook / "sitecustomize.py").write_text(HEAVY_IMPORTED.format(path=str(tmp_path / "heavy.txt")))
    env = {**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"}
    args = ["fit", "--config", "tiny", "--config", str(change), "--federation.privacy.target_epsilon=0.0001"]
    proc = run_process([sys.executable, "-m", "lightning_fed", *args], cwd=cwd, env=env)
    where = f"(config {str(change)!r})"
    line = (
        "error: federation.privacy.target_epsilon=0.0001 (the command line) with federation.privacy.delta=1e-05"
        f" (default) cannot be reached over federation.rounds=2 {where} at federation.sampling_rate=0.5 {where} by any"
        " noise multiplier (it would need one above the cap of 100; the smallest epsilon reachable under it is"
        " 0.1044); raise federation.privacy.target_epsilon or federation.privacy.delta, lower federation.rounds, or"
        " sample fewer clients (federation.sampling: poisson, with a smaller federation.sampling_rate)\n"
    )
    assert (proc.returncode, proc.stderr) == (2, line)
    assert list(cwd.iterdir()) == []
    assert (tmp_path / "heavy.txt").read_text() == ""
