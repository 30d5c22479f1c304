"""A ``trainer.accelerator`` the installed torch build or the system cannot run is refused before
torch is imported (:mod:`lightning_fed.accelerator_builds`; issue 41, the outside tester's
``t_accel_gpu_cpuonly``).

On 2599077 ``trainer.accelerator: gpu`` with a CPU build of torch was refused by the Trainer after
the imports (10.8 s of CPU) as ``trainer: No supported gpu backend found!``, naming neither the
option's value nor the build. The children cannot import torch (``tests/helpers/cli.py``); each runs
in an empty folder, which stays empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lightning_fed import trainer_options
from lightning_fed.accelerator_builds import accelerator_build_problem
from lightning_fed.shipped_configs import resolve_config
from lightning_fed.trainer_options import cpu_only_torch
from tests.helpers.cli import lightning_fed_without_torch

TINY = yaml.safe_load(Path(resolve_config("tiny")).read_text(encoding="utf-8"))


@pytest.mark.skipif(cpu_only_torch() is None, reason="the installed torch is not a CPU-only build (or on macOS)")
@pytest.mark.parametrize("accelerator", ["gpu", "cuda"])
def test_a_gpu_accelerator_on_a_cpu_build_of_torch_is_refused_before_torch(tmp_path, accelerator):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    path = tmp_path / "my.yaml"
    config = {**TINY, "trainer": {**TINY["trainer"], "accelerator": accelerator}}
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=cwd, hook=tmp_path / "hook")
    line = (
        f"trainer.accelerator {accelerator!r} needs torch built for CUDA, but the installed torch {cpu_only_torch()}"
        " is a CPU-only build; use accelerator: cpu (or auto), or install a CUDA build of torch"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(path)!r}: {line}\n")
    assert list(cwd.iterdir()) == []


def test_an_accelerator_the_build_or_the_system_cannot_run_is_refused(monkeypatch):
    monkeypatch.setattr(trainer_options, "cpu_only_torch", lambda: "2.13.0+cpu")
    assert accelerator_build_problem({"accelerator": "cuda"}) == (
        "trainer.accelerator 'cuda' needs torch built for CUDA, but the installed torch 2.13.0+cpu is a CPU-only"
        " build; use accelerator: cpu (or auto), or install a CUDA build of torch"
    )
    assert accelerator_build_problem({"accelerator": "cpu"}) is None
    monkeypatch.setattr(trainer_options, "cpu_only_torch", lambda: None)  # a CUDA build: the Trainer decides
    assert accelerator_build_problem({"accelerator": "gpu"}) is None
    monkeypatch.setattr("sys.platform", "linux")
    assert accelerator_build_problem({"accelerator": "mps"}) == (
        "trainer.accelerator 'mps' (Apple's Metal) runs only on macOS, not on linux; use cpu, cuda or auto"
    )
    monkeypatch.setattr("sys.platform", "darwin")
    assert accelerator_build_problem({"accelerator": "mps"}) is None
