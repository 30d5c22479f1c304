"""Runs made by tiny fits (``configs/tiny.yaml``, 2 rounds) for the report tests, made once per session.

``fedavg/s0``, ``fedavg/s1``: FedAvg, seeds 0 and 1 (one group, two seeds); ``fedprox/s0``: FedProx
(another method, comparable); ``bigger/s0``: a copy of ``fedavg/s0`` whose config names other
data (``synthetic_args.examples_per_client``), so it is not comparable with the others.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lightning_fed.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")


def _fit(root: Path, seed: int, *extra: str) -> Path:
    args = [
        "fit",
        "--config",
        TINY,
        f"--trainer.default_root_dir={root}",
        f"--seed_everything={seed}",
        "--federation.rounds=2",
        "--federation.local_steps=2",
        "--trainer.enable_progress_bar=false",
        *extra,
    ]
    main(args)
    return root / "lightning_logs" / "version_0"


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    runs = {
        "fedavg/s0": _fit(base / "fedavg" / "s0", 0),
        "fedavg/s1": _fit(base / "fedavg" / "s1", 1),
        "fedprox/s0": _fit(base / "fedprox" / "s0", 0, "--federation.strategy=FedProx"),
    }
    other = base / "bigger" / "s0"
    shutil.copytree(runs["fedavg/s0"], other)
    summary = json.loads((other / "summary.json").read_text())
    summary["config"]["data"]["init_args"]["synthetic_args"]["examples_per_client"] = 32
    (other / "summary.json").write_text(json.dumps(summary))
    runs["bigger/s0"] = other
    return runs
