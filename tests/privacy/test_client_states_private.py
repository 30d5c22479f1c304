"""SCAFFOLD in a private run (issue 40): each client's control variate lives in the run folder's
``client_states/`` (and the checkpoint's index of it), written only for the clients that have
trained and unnoised (``c_i+`` is the client's mean local gradient). Whoever holds the run folder
therefore sees the secret sample that amplification relies on, and a function of each sampled
client's data: ``summary.json`` must not claim a client-level epsilon against that party, while the
final model's (which holds only noised global states) keeps its amplified figure."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path) -> Path:
    """``configs/tiny.yaml`` as a private SCAFFOLD run: Poisson sampling at 0.5 of 8 clients, 1 round
    of 1 step, ``ClientLevelDP(Scaffold)`` with ``z = 1``."""
    cfg = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    fed = cfg["federation"]
    fed.pop("clients_per_round")
    fed.update(rounds=1, local_steps=1, sampling="poisson", sampling_rate=0.5, privacy={"noise_multiplier": 1.0})
    fed["strategy"] = {
        "class_path": "lightning_fed.privacy.ClientLevelDP",
        "init_args": {"strategy": {"class_path": "lightning_fed.strategies.Scaffold"}, "clip_norm": 0.5},
    }
    cfg["data"]["init_args"]["num_clients"] = 8
    cfg["data"]["init_args"]["synthetic_args"]["examples_per_client"] = 8
    cfg["trainer"]["default_root_dir"] = str(tmp_path / "run")
    path = tmp_path / "scaffold_dp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_private_scaffold_run_claims_no_client_epsilon_against_its_run_folder(tmp_path, key_store):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.update(OMP_NUM_THREADS="1", LIGHTNING_FED_KEY_DIR=str(key_store))
    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", str(_config(tmp_path))]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (version,) = (tmp_path / "run" / "lightning_logs").iterdir()
    # the premise: the run folder names the clients that trained (the secret sample), one file each
    trained = {int(re.match(r"client_(\d+)-", p.name).group(1)) for p in (version / "client_states").iterdir()}
    assert trained and trained <= set(range(8))
    parties = json.loads((version / "summary.json").read_text())["privacy"]["adversaries"]
    run_folder, final_model = parties["run_folder"], parties["final_model"]
    assert float(run_folder["epsilon"]["client"]) == math.inf, run_folder  # summary.json writes "inf"
    assert "client_states" in run_folder["not_covered"] and "client_states/" in run_folder["why"], run_folder
    # the final model's party sees neither: amplified (rate 0.5) and finite, below the same z at rate 1
    assert math.isfinite(float(final_model["epsilon"]["client"])) and "client_states" not in final_model["not_covered"]
    assert float(parties["server"]["epsilon"]["client"]) == math.inf  # central DP: unchanged
