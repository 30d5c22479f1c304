"""The CLI as people run it: ``python -m lightning_fed.cli ...`` as a subprocess of this checkout, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
for _name in ("LIGHTNING_FED_DEBUG", "LIGHTNING_FED_VERBOSE", "LIGHTNING_FED_LIVE_HELP"):  # a user's settings
    ENV.pop(_name, None)


def run_process(argv: list[str], *, cwd: Path = ROOT, env: dict | None = None, timeout: float = 1800):
    """``argv`` as a subprocess, its output captured as text (``env``: :data:`ENV` unless given).

    The generous time-out only stops a hung process; it never fires on a busy machine.
    """
    return subprocess.run(
        argv, cwd=cwd, env=ENV if env is None else env, capture_output=True, text=True, timeout=timeout
    )


def lightning_fed(
    *args: str, cwd: Path = ROOT, env: dict | None = None, timeout: float = 1800
) -> subprocess.CompletedProcess:
    """``lightning-fed ARGS`` from ``cwd``."""
    return run_process([sys.executable, "-m", "lightning_fed.cli", *args], cwd=cwd, env=env, timeout=timeout)


HEAVY = ("torch", "lightning", "transformers", "peft", "pandas")
"""Packages an answer given "before torch is imported" must not need."""


def heavy_blocked_env(folder: Path) -> dict:
    """:data:`ENV` with packages named :data:`HEAVY` put first on the path in ``folder``, each
    raising ``ImportError`` when imported: a command that answers under it imported none of them
    (what seconds of CPU a user waits for; shown without timing anything)."""
    for name in HEAVY:
        package = folder / name
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(f"raise ImportError('{name} was imported')\n")
    return {**ENV, "PYTHONPATH": f"{folder}{os.pathsep}{ROOT}"}


HEAVY_IMPORTED = """
import atexit
import sys

def _write():
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("lightning", "transformers", "peft"))
    with open({path!r}, "w") as handle:
        handle.write(" ".join(heavy))

atexit.register(_write)
"""
"""A ``sitecustomize`` (``.format(path=...)``) that writes to ``path``, as the process ends, which of
Lightning, transformers and PEFT it imported: a refusal that leaves it empty came before them, with
torch allowed (a check that reads a checkpoint or calls Opacus)."""


NO_TORCH = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise ImportError("torch imported before the config was checked")
        return None

sys.meta_path.insert(0, NoTorch())
"""
"""A ``sitecustomize`` that makes ``import torch`` fail with :data:`REACHED_TORCH`."""
REACHED_TORCH = "torch imported before the config was checked"
"""In a child's stderr: it went past every check made before torch (on to the live parser)."""


def no_torch_env(folder: Path) -> dict:
    """:data:`ENV` in which importing torch raises (:data:`NO_TORCH`, installed in ``folder``): a
    refusal printed under it was made before torch was imported (without timing anything)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(NO_TORCH)
    return {**ENV, "PYTHONPATH": f"{folder}{os.pathsep}{ROOT}"}


def lightning_fed_without_torch(*args: str, cwd: Path, hook: Path) -> subprocess.CompletedProcess:
    """``lightning-fed ARGS`` from ``cwd`` as ``python -m lightning_fed``, torch unimportable
    (:func:`no_torch_env`, its ``sitecustomize`` in ``hook``, outside ``cwd``)."""
    return run_process([sys.executable, "-m", "lightning_fed", *args], cwd=cwd, env=no_torch_env(hook))
