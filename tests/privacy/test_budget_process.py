"""``lightning-fed fit`` with a privacy budget no run can meet: exit 2, one ``error:`` line naming
the options, before anything is written (the budget is planned before training)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lightning_fed.errors import HINT

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)

UNREACHABLE = (
    "federation.privacy.target_epsilon=0.01 with federation.privacy.delta=1e-05 cannot be reached over 3 steps at"
    " sample rate 1.0 by any noise multiplier (The privacy budget is too low.); raise federation.privacy.target_epsilon"
    " or federation.privacy.delta, lower federation.rounds, or sample fewer clients (federation.sampling=poisson with"
    " a smaller federation.sampling_rate)"
)
FIRST_ROUND = (
    "federation.privacy.target_epsilon=0.5 is spent by the first round at federation.privacy.noise_multiplier=1"
    " (epsilon 1.11 per round, delta 0.218): raise target_epsilon or noise_multiplier"
)


@pytest.mark.parametrize(
    ("privacy", "message"),
    [
        ({"target_epsilon": 0.01, "delta": 1e-5}, UNREACHABLE),
        ({"target_epsilon": 0.5, "noise_multiplier": 1.0}, FIRST_ROUND),
    ],
    ids=["unreachable", "spent_by_round_1"],
)
def test_an_impossible_budget_exits_2_before_writing_anything(tmp_path, privacy, message):
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    cfg["federation"]["privacy"] = privacy
    cfg["federation"]["strategy"] = {
        "class_path": "lightning_fed.privacy.ClientLevelDP",
        "init_args": {"strategy": {"class_path": "lightning_fed.strategies.FedAvg"}},
    }
    cfg["trainer"]["default_root_dir"] = str(tmp_path / "run")
    config = tmp_path / "budget.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", str(config)],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr == f"error: {message}\n{HINT}\n"
    assert not (tmp_path / "run").exists()
