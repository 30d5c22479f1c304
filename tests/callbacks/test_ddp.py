"""Local training under Lightning's DDP (2 CPU processes, gloo) equals one process.

Two processes with per-device batch 2 see, at every local step, the same four examples as
one process with batch 4 (RoundBatchSampler splits each global batch over the ranks), and
DDP averages their gradients, so the global state after the rounds must match.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from lightning_fed.datamodules.round_sampler import RoundBatchSampler
from lightning_fed.federation.turn import TurnPlan

ROOT = Path(__file__).resolve().parents[2]


def test_ranks_split_each_global_batch():
    turns = [TurnPlan(0, 3), TurnPlan(1, 2)]
    args = (turns, [0, 10], [10, 5], 2, 0, 1)
    single = list(RoundBatchSampler(*args[:3], 4, *args[4:]))
    ranks = [list(RoundBatchSampler(*args, rank=r, num_replicas=2)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(single) == 5
    for one, a, b in zip(single, *ranks):
        assert sorted(a + b) == sorted(one) and len(a) == len(b) == 2


def _fit(root: Path, *overrides: str) -> subprocess.CompletedProcess:
    args = [
        sys.executable,
        "-m",
        "lightning_fed.cli",
        "--verbose",  # Lightning's "Initializing distributed: ... MEMBER: 2/2" shows the second rank ran
        "fit",
        "--config",
        str(ROOT / "configs/tiny.yaml"),
        f"--trainer.default_root_dir={root}",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_checkpointing=false",
        "--federation.rounds=2",
        "--federation.local_steps=3",
        *overrides,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


def test_ddp_two_processes_match_one(tmp_path):
    one = _fit(tmp_path / "one", "--data.init_args.batch_size=4")
    assert one.returncode == 0, one.stderr[-3000:]
    ddp = _fit(
        tmp_path / "ddp",
        "--data.init_args.batch_size=2",
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    assert "MEMBER: 2/2" in ddp.stderr  # the second rank really ran
    run = {d: tmp_path / d / "lightning_logs" / "version_0" for d in ("one", "ddp")}  # logger=false: own run folder
    a = load_file(str(run["one"] / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(run["ddp"] / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:  # gloo's all-reduce sums in another order: float32 rounding only
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-6)
    rounds = [json.loads((run[d] / "summary.json").read_text())["rounds"] for d in ("one", "ddp")]
    assert [r["clients"] for r in rounds[0]] == [r["clients"] for r in rounds[1]]
