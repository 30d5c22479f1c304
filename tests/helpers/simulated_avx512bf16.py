"""``python tests/helpers/simulated_avx512bf16.py MODULE ARGS...``: ``python -m MODULE ARGS...`` on an AVX512-BF16 CPU.

On such a CPU bitsandbytes (imported by PEFT) takes another code path at import
(``bitsandbytes/backends/cpu/ops.py``): it tries to fetch a kernel from the Hugging Face hub
through the ``kernels`` package and logs a warning when that fails. This runner makes any
machine take that path: ``has_avx512bf16`` answers True and ``kernels`` cannot be imported.
When ``SIMULATED_AVX512BF16_MARKER`` names a file, it is written once the check was made, so a
test knows the path was taken.
"""

from __future__ import annotations

import importlib.abc
import os
import runpy
import sys

MARKER_ENV = "SIMULATED_AVX512BF16_MARKER"


def _has_avx512bf16() -> bool:
    if marker := os.environ.get(MARKER_ENV):
        with open(marker, "w") as f:
            f.write("has_avx512bf16 called\n")
    return True


class _AVX512BF16(importlib.abc.MetaPathFinder):
    """Patches ``bitsandbytes.functional.has_avx512bf16`` just before the CPU backend imports it."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201 - the finder protocol
        if name == "bitsandbytes.backends.cpu.ops":
            import bitsandbytes.functional

            bitsandbytes.functional.has_avx512bf16 = _has_avx512bf16
        return None  # the regular finders import the module


if __name__ == "__main__":
    sys.modules["kernels"] = None  # `from kernels import get_kernel` raises ImportError, as without the package
    sys.meta_path.insert(0, _AVX512BF16())
    sys.path[0] = os.getcwd()  # as `python -m` has it, not this file's folder
    module, sys.argv = sys.argv[1], [sys.argv[1], *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
