"""``lightning-fed plan`` says when a config's clients cannot train together, with the run's reason.

The planner builds no model; it asks the fallback rules that need none
(:func:`~lightning_fed.planning.group_fallback.planned_fallback`), which the run asks first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lightning_fed.planning.group_fallback import planned_fallback
from lightning_fed.shipped_configs import CONFIG_DIR, shipped_configs
from tests.batching.test_fallback import EXPECTED, _load, config_fallback

ROOT = Path(__file__).resolve().parents[2]


def plan(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "lightning_fed", "plan", *args], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_plan_of_fedpdpo_says_its_clients_train_one_after_another():
    done = plan("--config", "fedpdpo")
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().splitlines()[-1] == (
        "federation.batch_clients: auto: clients train one after another:"
        " PDPOModule does not declare that it reduces its loss per client (batchable = True)"
    )
    assert "clients trained together" not in done.stdout


def test_plan_of_feddpo_still_says_k():
    done = plan("--config", "feddpo")
    assert done.returncode == 0, done.stderr
    assert "clients trained together (federation.batch_clients: auto): K = " in done.stdout
    assert "one after another" not in done.stdout


@pytest.mark.parametrize("name", sorted(shipped_configs()))
def test_the_planner_gives_the_run_reason_for_every_shipped_config(name):
    """Each shipped config: the planner's reason is the one the run's rules find on the built module."""
    cfg = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())
    hooks = [_load(h["class_path"]) for h in (cfg.get("federation") or {}).get("hooks") or []]
    planned = planned_fallback(cfg, hooks)
    assert planned == config_fallback(name)
    assert (planned is None) == (EXPECTED[name] is None)


def test_fit_s_warning_and_plan_s_line_are_one_wording():
    """On 0be92cf ``fit`` warned ``federation.batch_clients: clients train one after another: ...``
    where ``plan`` printed ``federation.batch_clients: auto: clients train ...``: now both come from
    :func:`~lightning_fed.batching.fallback.fallback_line`."""
    from lightning_fed.batching.batched_turns import warn_fallback
    from lightning_fed.plan_cli import group_lines

    reason = "PDPOModule does not declare that it reduces its loss per client (batchable = True)"
    for batch_clients in ("auto", 4):
        with pytest.warns(UserWarning) as warned:
            warn_fallback(batch_clients, reason)
        assert [str(w.message) for w in warned] == [group_lines(None, None, batch_clients, reason)[-1]]
