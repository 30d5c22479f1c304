"""Process helpers of :class:`~lightning_fed.deploy.local_deployment.LocalDeployment`.

Every process started for a deployment (:class:`ProcessGroup`), each with its log
(:class:`ManagedProcess`); finding every descendant of a process through ``/proc`` (no psutil
dependency), signalling a PID only if it is still the process that was seen (its start time),
and free ports. Linux only.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass
class ManagedProcess:
    """A process started by :class:`~lightning_fed.deploy.local_deployment.LocalDeployment`, with its log."""

    name: str
    popen: subprocess.Popen
    log_path: Path
    flwr_home: Path
    port: int | None = None
    node_id: int | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])


class ProcessGroup:
    """Every process started for one deployment, and every descendant it spawns, stopped by PID.

    Each process gets its own session (so a signal to its group reaches what it forks) and an
    environment variable carrying :attr:`marker`, which all descendants inherit: that finds
    orphans re-parented to init and children started in a new session (the SuperLink's
    SuperExec). A PID is only signalled while it is still the process that was seen (its
    start time), never a recycled one.

    Args:
        logs_dir: Where each process's combined stdout/stderr goes (``<name>.log``).
        grace_period: Seconds between SIGTERM and SIGKILL in :meth:`stop`.
    """

    def __init__(self, logs_dir: Path, grace_period: float = 5.0) -> None:
        self.logs_dir, self.grace_period = logs_dir, grace_period
        self.marker = uuid.uuid4().hex
        self.started: list[ManagedProcess] = []  # everything started, incl. flwr CLI calls
        self.seen: dict[int, int] = {}  # pid -> starttime of every process seen

    def spawn(
        self, name: str, cmd: list[str], env: dict[str, str], cwd: Path, flwr_home: Path, port: int | None = None
    ) -> ManagedProcess:
        """Start ``cmd`` in its own session, logging to ``logs_dir/<name>.log``."""
        flwr_home.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.logs_dir / f"{name}.log"
        with open(log_path, "ab") as log_file:
            log_file.write(f"$ {' '.join(cmd)}\n".encode())
            log_file.flush()
            popen = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**env, MARKER_ENV: self.marker},
                cwd=str(cwd),
                start_new_session=True,
            )
        proc = ManagedProcess(name, popen, log_path, flwr_home, port=port)
        self.started.append(proc)
        self.remember([proc.pid])
        return proc

    def remember(self, pids: Sequence[int] = ()) -> None:
        """Record ``pids`` and every live descendant of the processes started."""
        for pid in pids:
            stat = _proc_stat(pid)
            if stat is not None:
                self.seen.setdefault(pid, stat[2])
        roots = [p.pid for p in self.started if p.alive()]
        for pid, start in _descendants(roots).items():
            self.seen.setdefault(pid, start)

    def kill_tree(self, proc: ManagedProcess, sig: int) -> None:
        """Send ``sig`` to ``proc``, its process group and all its descendants."""
        descendants = _descendants([proc.pid])
        self.seen.update({p: s for p, s in descendants.items() if p not in self.seen})
        if proc.alive():
            try:
                os.killpg(proc.pid, sig)  # its own process group (start_new_session)
            except (ProcessLookupError, PermissionError):
                _signal_pid(proc.pid, sig)
        for pid, start in descendants.items():
            _signal_pid(pid, sig, start)

    def leftover_pids(self) -> list[int]:
        """PIDs started (directly or as descendants) that are still alive."""
        alive = {p.pid for p in self.started if p.alive()}
        alive |= {pid for pid, start in self.seen.items() if _pid_alive(pid, start)}
        alive |= set(_marked_pids(self.marker))
        alive.discard(os.getpid())
        return sorted(alive)

    def stop(self, last: ManagedProcess | None = None) -> None:
        """SIGTERM every process (``last`` after the others), SIGKILL what survives the grace period."""
        self.remember()
        targets = dict(self.seen)
        targets.update(_marked_pids(self.marker))
        targets.pop(os.getpid(), None)
        own = [p for p in self.started if p.alive()]
        own.sort(key=lambda p: p is last)
        for p in own:
            _signal_pid(p.pid, signal.SIGTERM)
        for pid, start in targets.items():
            _signal_pid(pid, signal.SIGTERM, start)

        deadline = time.monotonic() + self.grace_period
        while time.monotonic() < deadline:
            for p in own:
                p.popen.poll()  # reap our direct children
            if not self.leftover_pids():
                break
            time.sleep(0.1)

        # Anything new (e.g. spawned while shutting down) or still alive: SIGKILL.
        targets.update(_marked_pids(self.marker))
        targets.update(_descendants([p.pid for p in own if p.alive()]))
        for p in own:
            if p.alive():
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    _signal_pid(p.pid, signal.SIGKILL)
        for pid, start in targets.items():
            _signal_pid(pid, signal.SIGKILL, start)
        for p in own:
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        # Children of killed processes are reparented to init, which reaps them.
        deadline = time.monotonic() + 5
        while self.leftover_pids() and time.monotonic() < deadline:
            time.sleep(0.1)
