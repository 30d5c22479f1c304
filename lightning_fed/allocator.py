"""The process's heap on a CPU run: glibc's ``malloc`` told to keep a training step's memory.

PyTorch's CPU tensors come straight from the C library's ``malloc`` (``c10``'s default CPU allocator
has no cache; its ``CPUCachingAllocator`` is for mobile builds and is not reachable from Python). On
Linux with glibc a block over the ``mmap`` threshold is a fresh ``mmap`` each time and goes back to the
kernel on ``free``, and the threshold adapts only up to 32 MiB; every page of such a block faults in
(the kernel zeroes it) on first touch. A step whose activations pass 32 MiB (4 clients x 1,536 tokens
of SmolLM2-135M's MLP: 36 MiB) therefore pays for its memory again in every step: 3.8 million page
faults and 12 s of system time in a 50 s round (benchmarks/RESULTS.md, "Why the batched long-prompt
round is slower"). The same happens, more slowly, when the heap's free top is given back (trimmed)
between steps.

:func:`keep_heap` sets, once per process, ``M_MMAP_THRESHOLD`` to :data:`MMAP_THRESHOLD` (64 MiB,
fixed: blocks under it from the heap, larger ones mapped as before) and ``M_TRIM_THRESHOLD`` to its
largest value (the heap's free top never given back), through ``mallopt`` (the variables
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` are read only when the process starts). The cost:
the process's resident memory stays at the heap's peak once reached instead of falling between steps
(a steady working set, as PyTorch's CUDA caching allocator keeps one); figures in
benchmarks/RESULTS.md, "The heap kept". It is applied on CPU runs only (a GPU step's activations are
the CUDA allocator's), on glibc only (musl, macOS and Windows have other allocators: a no-op there,
one debug log line), and not when the user set any of glibc's malloc variables or tunables themselves.
It is opt-in (``LIGHTNING_FED_KEEP_HEAP=1``): measured, it took the batched long-prompt round from 1.074x
to 1.017x of the sequential one, while the resident memory it keeps was not measured against glibc's
defaults in the same run (the benchmark process peaked at 18.3 GB), so a run that fitted in memory is
not put at risk by default.

PyTorch's own knob for CPU memory, ``THP_MEM_ALLOC_ENABLE=1`` (transparent huge pages for blocks of
2 MiB and more), is read once at PyTorch's first allocation, so it cannot be set from a run; and it
makes the faults 512 times fewer but the kernel still zeroes every page of every fresh block.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger(__name__)

#: ``mallopt``'s parameters (glibc's ``malloc.h``).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: Blocks under it come from the heap, larger ones are mapped and unmapped as glibc does by default:
#: twice the dynamic threshold's 32 MiB, above a group step's widest activation at the long prompt
#: (4 clients x 1,536 tokens x SmolLM2-135M's MLP 1,536 x 4 B = 36 MiB), under the LM head's logits
#: (hundreds of MiB, made a few times a step). Every block from the heap (``M_MMAP_MAX`` 0) was measured
#: first and let the heap grow past 18 GiB in one benchmark process: freed logits-sized holes fragment.
MMAP_THRESHOLD = 64 * 2**20
#: ``M_TRIM_THRESHOLD``'s value that never trims: ``mallopt`` takes an ``int``, and glibc reads -1 as
#: the largest ``size_t``.
NEVER_TRIM = -1
#: The opt-in: ``LIGHTNING_FED_KEEP_HEAP=1`` keeps the heap; unset or anything else leaves glibc's defaults.
OPT_IN = "LIGHTNING_FED_KEEP_HEAP"
#: glibc's own settings: when the user set one, the allocator is theirs.
USER_SETTINGS = (
    "MALLOC_MMAP_MAX_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "GLIBC_TUNABLES",
)

_applied: bool | None = None  # None: not decided yet in this process; then whether it was applied


def glibc_version() -> str | None:
    """glibc's version (``"2.36"``) when this process runs on glibc, else ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        name = os.confstr("CS_GNU_LIBC_VERSION")  # glibc only: musl has no such name
    except (ValueError, OSError, AttributeError):
        return None
    return name.split()[-1] if name and name.startswith("glibc") else None


def _reason_to_skip(device: object) -> str | None:
    if str(device).split(":")[0] != "cpu":
        return f"the run trains on {device}"
    if os.environ.get(OPT_IN, "").strip().lower() not in {"1", "true", "yes", "on"}:
        return f"not asked for ({OPT_IN}=1)"
    user = [name for name in USER_SETTINGS if name in os.environ]
    if user:
        return f"the process sets {', '.join(user)}"
    if glibc_version() is None:
        return f"not glibc ({sys.platform})"
    return None


def keep_heap(device: object = "cpu") -> bool:
    """Keep the heap for the process's life on a CPU run on glibc (the module's docstring): ``True``
    when the setting is in effect after the call. Decided once per process: later calls return the
    first call's answer and call ``mallopt`` no more."""
    global _applied
    if _applied is not None:
        return _applied
    reason = _reason_to_skip(device)
    if reason is not None:
        log.debug("glibc's malloc left as it is: %s", reason)
        if str(device).split(":")[0] != "cpu":
            return False  # not decided: a later CPU fit in this process may still apply it
        _applied = False
        return False
    libc = ctypes.CDLL(None)  # the process's own C library
    ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and libc.mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) == 1
    log.debug("glibc %s: blocks under %d B from the heap, the heap kept: %s", glibc_version(), MMAP_THRESHOLD, ok)
    _applied = ok
    return ok
