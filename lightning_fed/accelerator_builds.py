"""A ``trainer.accelerator`` the installed torch build or this operating system cannot run,
refused before torch is imported.

``trainer.accelerator: gpu`` with a torch built for the CPU alone was refused by the Trainer after
10 s of imports (``No supported gpu backend found!``, naming neither the option nor the build).
Here the build is read as :func:`~lightning_fed.trainer_options.cpu_only_torch` reads it (its
``torch/version.py``, from the distribution's metadata: nothing imported): on such a build (not on
macOS, where ``gpu`` means MPS; not with ``torch_xla``) ``gpu`` and ``cuda`` are refused, naming
the build. ``mps`` needs macOS (Lightning's ``MPSAccelerator.is_available``: ``platform.system()
== "Darwin"``), on every build. Anything less certain (a CUDA build on a machine without a GPU, a
``devices`` count above the GPUs present: they need torch to count) is left to the Trainer.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from lightning_fed import trainer_options

GPU_NAMES = ("gpu", "cuda")
"""``trainer.accelerator`` names that need a CUDA (or, for ``gpu`` on macOS, MPS) build."""


def accelerator_build_problem(trainer: Mapping[str, Any]) -> str | None:
    """The line refusing ``trainer.accelerator`` that the installed torch or this system certainly
    cannot run, or ``None``."""
    accelerator = trainer.get("accelerator")
    if not isinstance(accelerator, str):
        return None
    if accelerator == "mps" and sys.platform != "darwin":
        return (
            f"trainer.accelerator 'mps' (Apple's Metal) runs only on macOS, not on {sys.platform};"
            " use cpu, cuda or auto"
        )
    if accelerator in GPU_NAMES and (build := trainer_options.cpu_only_torch()) is not None:
        return (
            f"trainer.accelerator {accelerator!r} needs torch built for CUDA, but the installed torch {build} is a"
            " CPU-only build; use accelerator: cpu (or auto), or install a CUDA build of torch"
        )
    return None
