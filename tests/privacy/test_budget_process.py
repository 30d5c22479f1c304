"""``lightning-fed fit`` with a privacy budget no run can meet: exit 2, one ``error:`` line naming
the options, before anything is written (the budget is planned before training)."""

from __future__ import annotations

import pytest
import yaml

from lightning_fed.errors import HINT
from tests.helpers.cli import ROOT, lightning_fed

UNREACHABLE = (
    "federation.privacy.target_epsilon=0.01 with federation.privacy.delta=1e-05 cannot be reached over 3 rounds at"
    " sample rate 1 by any noise multiplier (The privacy budget is too low.); raise federation.privacy.target_epsilon"
    " or federation.privacy.delta, lower federation.rounds, or sample fewer clients (federation.sampling=poisson with"
    " a smaller federation.sampling_rate)"
)
FIRST_ROUND = (
    "federation.privacy.target_epsilon=0.5 is spent by the first round at federation.privacy.noise_multiplier=1"
    " (epsilon 4.73 per round, delta 1e-05): raise target_epsilon or noise_multiplier"
)


ADAPTIVE_SPLIT = (
    "ClientLevelDP adaptive.count_stddev=2 is too small for the client-level noise multiplier 4.844 (adaptive clipping"
    " needs 2 * count_stddev > noise_multiplier): raise count_stddev above 2.422, or lower the noise multiplier (a"
    " larger federation.privacy.target_epsilon)"
)


DP_SGD_UNREACHABLE = (
    "model.dp_sgd.target_epsilon=0.01 with federation.privacy.delta=1e-05 cannot be reached over 15 local steps"
    " (3 rounds x 5, a client of 16+ examples) at sample rate 0.25 by any noise multiplier (The privacy budget is too"
    " low.); raise model.dp_sgd.target_epsilon or federation.privacy.delta, or lower federation.rounds,"
    " federation.local_steps (local_epochs) or data.batch_size"
)


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
        (lambda cfg: _client_level(cfg, {"target_epsilon": 0.5, "noise_multiplier": 1.0}), FIRST_ROUND),
        (lambda cfg: _adaptive(cfg, {"target_epsilon": 1.5, "delta": 1e-5}), ADAPTIVE_SPLIT),
        # the default delta (N = 4: min(4^-1.1 = 0.22, 1e-5)): a delta of 0.22 would "meet" any budget
        (lambda cfg: _example_level(cfg, {"clip_norm": 1.0, "target_epsilon": 0.01}), DP_SGD_UNREACHABLE),
    ],
    ids=["unreachable", "spent_by_round_1", "adaptive_split", "dp_sgd_unreachable"],
)
def test_an_impossible_budget_exits_2_before_writing_anything(tmp_path, edit, message):
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    edit(cfg)
    cfg["trainer"]["default_root_dir"] = str(tmp_path / "run")
    config = tmp_path / "budget.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = lightning_fed("fit", "--config", str(config))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr == f"error: {message}\n{HINT}\n"
    assert not (tmp_path / "run").exists()
