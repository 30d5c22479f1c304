"""Process helpers of :class:`~lightning_fed.deploy.local_deployment.LocalDeployment`.

Finding every descendant of a process through ``/proc`` (no psutil dependency), signalling
a PID only if it is still the process that was seen (its start time), and free ports.
Linux only.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """Return ``(state, ppid, starttime)`` of ``pid`` or None if it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces/parentheses: split after the last ')'.
    rest = raw[raw.rindex(")") + 2 :].split()
    return rest[0], int(rest[1]), int(rest[19])


def _pid_alive(pid: int, starttime: int | None = None) -> bool:
    """True if ``pid`` exists, is not a zombie and (optionally) has this start time."""
    stat = _proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return False
    return starttime is None or stat[2] == starttime


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _descendants(roots: Sequence[int]) -> dict[int, int]:
    """Map pid -> starttime for all live descendants of ``roots`` (roots excluded)."""
    children: dict[int, list[int]] = {}
    starttimes: dict[int, int] = {}
    for pid in _all_pids():
        stat = _proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        children.setdefault(stat[1], []).append(pid)
        starttimes[pid] = stat[2]
    found: dict[int, int] = {}
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found[child] = starttimes[child]
                stack.append(child)
    return found


#: Environment variable carrying a per-deployment id; inherited by every descendant.
MARKER_ENV = "LIGHTNING_FED_LOCAL_DEPLOYMENT_ID"


def _marked_pids(marker: str) -> dict[int, int]:
    """Map pid -> starttime of live processes whose environment carries ``marker``."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found: dict[int, int] = {}
    for pid in _all_pids():
        if pid == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            stat = _proc_stat(pid)
            if stat is not None and stat[0] not in ("Z", "X"):
                found[pid] = stat[2]
    return found


def _signal_pid(pid: int, sig: int, starttime: int | None = None) -> None:
    if starttime is not None and not _pid_alive(pid, starttime):
        return  # gone, or the PID was reused by an unrelated process
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def free_port(host: str = "127.0.0.1") -> int:
    """Return a currently free TCP port on ``host`` (picked by the kernel)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
