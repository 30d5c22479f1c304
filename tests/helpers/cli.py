"""The CLI as people run it: ``python -m lightning_fed.cli ...`` as a subprocess of this checkout, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)


def lightning_fed(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``lightning-fed ARGS`` from ``cwd``; the generous time-out only stops a hung process."""
    return subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=1800,
    )
