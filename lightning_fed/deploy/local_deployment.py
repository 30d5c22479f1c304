"""Run a Flower *deployment* (SuperLink + N SuperNodes + ``flwr run``) as local processes.

Written and tested against flwr 1.41.0, where (unlike older releases) the SuperLink
serves the Control, Fleet and Runtime APIs over HTTP on a single ``--host/--port``, and
the ``flwr`` CLI reads its SuperLink connections from ``$FLWR_HOME/config.toml``::

    [superlink]
    default = "<name>"

    [superlink.<name>]
    address = "127.0.0.1:<superlink port>"
    insecure = true

Process tree in the default ``subprocess`` isolation mode (all resolved through ``PATH``,
which is why the environment's ``bin`` folder is put first on it)::

    flower-superlink --insecure --host H --port P
      └─ flower-superexec --runtime-api-address H:P --parent-pid <superlink>   (new session!)
           └─ flwr-serverapp ...            one per run
    flower-supernode --insecure --superlink H:P --port Q --node-config "k=v ..."
      └─ flower-superexec --runtime-api-address H:Q --parent-pid <supernode>
           └─ flwr-clientapp ...            one per *message* (i.e. per round)

The SuperLink starts its SuperExec with ``start_new_session=True``, so killing the
SuperLink's process group does not reach it; :meth:`LocalDeployment.stop` therefore
finds every descendant through ``/proc`` (plus a unique marker environment variable that
all children inherit, which also catches orphans re-parented to init) and kills them by
PID. Linux only.

Example::

    with LocalDeployment("path/to/app", num_supernodes=2, workdir=tmp) as dep:
        result = dep.run({"num-server-rounds": 2, "output-path": str(tmp / "out.json")})
        assert result.returncode == 0, result.output
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_fed.deploy.processes import (  # noqa: F401  (_descendants, _pid_alive: used by the tests)
    MARKER_ENV,
    _proc_stat,
    _pid_alive,
    _descendants,
    _marked_pids,
    _signal_pid,
    free_port,
    _port_open,
)

__all__ = ["DeploymentError", "LocalDeployment", "ManagedProcess", "RunResult"]


#: Environment set for every process started (on top of the caller's environment).
BASE_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}

_SUPERNODE_ID_RE = re.compile(r"SuperNode ID: (\d+)")
_RUN_ID_RE = re.compile(r"Successfully started run (\d+)")
_SAFE_BARE_STRING = re.compile(r"^[^\s'\"=]*$")


class DeploymentError(RuntimeError):
    """A process of the deployment failed to start or died unexpectedly."""


@dataclass
class ManagedProcess:
    """A process started by :class:`LocalDeployment`."""

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


@dataclass
class RunResult:
    """Outcome of :meth:`LocalDeployment.run` (one ``flwr run`` invocation)."""

    returncode: int | None
    output: str
    seconds: float
    run_id: int | None = None
    timed_out: bool = False
    command: list[str] = field(default_factory=list)
    #: Final run status from ``flwr list`` (e.g. ``finished:completed``,
    #: ``finished:failed``); ``flwr run --stream`` exits 0 even if the ServerApp failed.
    status: str | None = None
    status_details: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.status == "finished:completed"


# --------------------------------------------------------------------------------------
# Config formatting
# --------------------------------------------------------------------------------------


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for the characters we allow
    raise TypeError(f"Unsupported config value type {type(value).__name__}: {value!r}")


def format_config_string(config: Mapping[str, Any]) -> str | None:
    """Format ``config`` as Flower's ``'k1=v1 k2="s"'`` syntax.

    Returns None when a value cannot be written safely inline (Flower splits the string
    with a regex, so strings with spaces or quotes break); write a TOML file instead.
    """
    parts = []
    for key, value in config.items():
        if isinstance(value, str) and not _SAFE_BARE_STRING.match(value):
            return None
        parts.append(f"{key}={_toml_value(value)}")
    return " ".join(parts)


def _write_toml(path: Path, config: Mapping[str, Any]) -> Path:
    import tomli_w  # a dependency of flwr

    path.write_text(tomli_w.dumps(dict(config)), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------
# LocalDeployment
# --------------------------------------------------------------------------------------


class LocalDeployment:
    """SuperLink + N SuperNodes as local processes, and ``flwr run`` against them.

    Args:
        app_dir: Flower app folder (contains the ``pyproject.toml`` with ``[tool.flwr.app]``).
        num_supernodes: number of SuperNodes to start.
        node_configs: one dict per SuperNode passed as ``--node-config``; defaults to
            ``{"partition-id": i, "num-partitions": num_supernodes}``.
        workdir: folder for logs, ``FLWR_HOME`` folders and generated config files.
        host: interface everything binds to / connects to.
        connection_name: name of the SuperLink connection in ``config.toml``.
        startup_timeout: seconds to wait for the SuperLink and all SuperNodes.
        grace_period: seconds between SIGTERM and SIGKILL when stopping.
        extra_env: extra environment for every process (e.g. ``PYTHONPATH``).
        superexec_poll_interval: seconds between the SuperExecs' task polls
            (``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``, Flower's default is 1.0). Lower
            values shave ~1 s of latency per round per hop; None keeps Flower's default.
        bin_dir: folder holding the Flower executables; defaults to the folder of
            ``sys.executable`` (the current virtual environment).
    """

    def __init__(
        self,
        app_dir: str | os.PathLike,
        num_supernodes: int = 2,
        node_configs: Sequence[Mapping[str, Any]] | None = None,
        workdir: str | os.PathLike | None = None,
        *,
        host: str = "127.0.0.1",
        connection_name: str = "local-deployment",
        startup_timeout: float = 60.0,
        grace_period: float = 5.0,
        extra_env: Mapping[str, str] | None = None,
        superexec_poll_interval: float | None = 0.2,
        bin_dir: str | os.PathLike | None = None,
    ) -> None:
        self.app_dir = Path(app_dir).resolve()
        if not (self.app_dir / "pyproject.toml").is_file():
            raise FileNotFoundError(f"No pyproject.toml in app folder {self.app_dir}")
        if node_configs is None:
            node_configs = [
                {"partition-id": i, "num-partitions": num_supernodes}
                for i in range(num_supernodes)
            ]
        if len(node_configs) != num_supernodes:
            raise ValueError(
                f"{len(node_configs)} node configs given for {num_supernodes} SuperNodes"
            )
        self.num_supernodes = num_supernodes
        self.node_configs = [dict(c) for c in node_configs]
        if workdir is None:
            import tempfile

            workdir = tempfile.mkdtemp(prefix="lightning-fed-deploy-")
        self.workdir = Path(workdir).resolve()
        self.host = host
        self.connection_name = connection_name
        self.startup_timeout = startup_timeout
        self.grace_period = grace_period
        self.extra_env = dict(extra_env or {})
        self.superexec_poll_interval = superexec_poll_interval
        self.bin_dir = Path(bin_dir) if bin_dir else Path(sys.executable).parent

        self.marker = uuid.uuid4().hex
        self.superlink: ManagedProcess | None = None
        self.supernodes: list[ManagedProcess] = []
        self._all: list[ManagedProcess] = []  # everything started, incl. flwr CLI calls
        self._seen: dict[int, int] = {}  # pid -> starttime of every process seen
        self._run_counter = 0

    # ---------------------------------------------------------------- paths / env
    @property
    def logs_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def cli_flwr_home(self) -> Path:
        """``FLWR_HOME`` of the ``flwr`` CLI (holds ``config.toml``)."""
        return self.workdir / "flwr_home" / "cli"

    @property
    def superlink_address(self) -> str:
        assert self.superlink is not None and self.superlink.port is not None
        return f"{self.host}:{self.superlink.port}"

    @property
    def supernode_pids(self) -> list[int]:
        return [p.pid for p in self.supernodes]

    @property
    def node_ids(self) -> list[int | None]:
        """Node id of each SuperNode (by index), as logged by the SuperNode."""
        return [p.node_id for p in self.supernodes]

    def _exe(self, name: str) -> str:
        path = self.bin_dir / name
        return str(path) if path.exists() else name

    def _env(self, flwr_home: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(BASE_ENV)
        env["FLWR_HOME"] = str(flwr_home)
        # Children (flower-superexec, flwr-serverapp, flwr-clientapp) are found on PATH.
        env["PATH"] = os.pathsep.join([str(self.bin_dir), env.get("PATH", "")])
        if self.superexec_poll_interval is not None:
            env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = str(self.superexec_poll_interval)
        env.update(self.extra_env)
        env[MARKER_ENV] = self.marker
        return env

    def write_flower_config(self) -> Path:
        """Write ``$FLWR_HOME/config.toml`` of the CLI with one insecure connection."""
        self.cli_flwr_home.mkdir(parents=True, exist_ok=True)
        path = self.cli_flwr_home / "config.toml"
        path.write_text(
            "[superlink]\n"
            f'default = "{self.connection_name}"\n\n'
            f"[superlink.{self.connection_name}]\n"
            f'address = "{self.superlink_address}"\n'
            "insecure = true\n",
            encoding="utf-8",
        )
        return path

    # ---------------------------------------------------------------- processes
    def _spawn(
        self, name: str, cmd: list[str], flwr_home: Path, port: int | None = None
    ) -> ManagedProcess:
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
                env=self._env(flwr_home),
                cwd=str(self.workdir),
                start_new_session=True,  # own session and process group
            )
        proc = ManagedProcess(name, popen, log_path, flwr_home, port=port)
        self._all.append(proc)
        self._remember([proc.pid])
        return proc

    def _remember(self, pids: Sequence[int] = ()) -> None:
        for pid in pids:
            stat = _proc_stat(pid)
            if stat is not None:
                self._seen.setdefault(pid, stat[2])
        roots = [p.pid for p in self._all if p.alive()]
        for pid, start in _descendants(roots).items():
            self._seen.setdefault(pid, start)

    def _fail(self, message: str, *procs: ManagedProcess) -> DeploymentError:
        details = "\n".join(
            f"--- {p.name} (pid {p.pid}, exit code {p.popen.poll()}) log tail: "
            f"{p.log_path}\n{p.log_tail()}"
            for p in procs
        )
        return DeploymentError(f"{message}\n{details}")

    def start(self) -> LocalDeployment:
        """Start the SuperLink and SuperNodes and wait until all nodes are connected."""
        if self.superlink is not None:
            raise RuntimeError("LocalDeployment already started")
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_superlink()
            self.write_flower_config()
            for index in range(self.num_supernodes):
                self._start_supernode(index)
            self._wait_supernodes()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_superlink(self) -> None:
        port = free_port(self.host)
        cmd = [
            self._exe("flower-superlink"),
            "--insecure",
            "--host",
            self.host,
            "--port",
            str(port),
        ]
        self.superlink = self._spawn(
            "superlink", cmd, self.workdir / "flwr_home" / "superlink", port
        )
        deadline = time.monotonic() + self.startup_timeout
        while not _port_open(self.host, port):
            if not self.superlink.alive():
                raise self._fail("SuperLink exited during startup.", self.superlink)
            if time.monotonic() > deadline:
                raise self._fail(
                    f"SuperLink not listening on {self.host}:{port} after "
                    f"{self.startup_timeout:.0f}s.",
                    self.superlink,
                )
            time.sleep(0.2)

    def _node_config_arg(self, index: int) -> str:
        config = self.node_configs[index]
        inline = format_config_string(config)
        if inline is not None:
            return inline
        return str(_write_toml(self.workdir / f"node-config-{index}.toml", config))

    def _start_supernode(self, index: int) -> ManagedProcess:
        port = free_port(self.host)
        cmd = [
            self._exe("flower-supernode"),
            "--insecure",
            "--superlink",
            self.superlink_address,
            "--host",
            self.host,
            "--port",
            str(port),
        ]
        if self.node_configs[index]:
            cmd += ["--node-config", self._node_config_arg(index)]
        # Each SuperNode gets its own FLWR_HOME (as on separate machines); this also
        # avoids two flwr-clientapp processes installing the same FAB concurrently.
        proc = self._spawn(
            f"supernode-{index}", cmd, self.workdir / "flwr_home" / f"supernode-{index}", port
        )
        self.supernodes.append(proc)
        return proc

    def _wait_supernodes(self) -> None:
        assert self.superlink is not None
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if not self.superlink.alive():
                raise self._fail("SuperLink died while SuperNodes started.", self.superlink)
            pending = []
            for proc in self.supernodes:
                if proc.node_id is None:
                    match = _SUPERNODE_ID_RE.search(proc.log_tail(400))
                    if match:
                        proc.node_id = int(match.group(1))
                if not proc.alive():
                    raise self._fail(f"{proc.name} exited during startup.", proc)
                if proc.node_id is None:
                    pending.append(proc)
            if not pending:
                break
            if time.monotonic() > deadline:
                raise self._fail(
                    f"{len(pending)} SuperNode(s) not connected after "
                    f"{self.startup_timeout:.0f}s.",
                    *pending,
                    self.superlink,
                )
            time.sleep(0.2)
        self._remember()

    # ---------------------------------------------------------------- flwr CLI
    def _cli(
        self, args: list[str], name: str, timeout: float | None
    ) -> tuple[ManagedProcess, int | None, float, bool]:
        start = time.monotonic()
        proc = self._spawn(name, [self._exe("flwr"), *args], self.cli_flwr_home)
        try:
            returncode: int | None = proc.popen.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            self._kill_tree(proc, signal.SIGKILL)
            proc.popen.wait()
            returncode, timed_out = None, True
        return proc, returncode, time.monotonic() - start, timed_out

    def run(
        self,
        run_config: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = 600.0,
        stream: bool = True,
        extra_args: Sequence[str] = (),
    ) -> RunResult:
        """``flwr run <app_dir> <connection> --stream [--run-config ...]``.

        With ``--stream`` the command returns when the run has finished. Run-config
        overrides are written to a TOML file (keys must exist in the app's
        ``[tool.flwr.app.config]``). On ``timeout`` the CLI is killed, the run is stopped
        with ``flwr stop`` and ``timed_out`` is set.
        """
        if self.superlink is None:
            raise RuntimeError("LocalDeployment not started")
        self._run_counter += 1
        name = f"flwr-run-{self._run_counter}"
        args = ["run", str(self.app_dir), self.connection_name]
        if stream:
            args.append("--stream")
        if run_config:
            path = _write_toml(self.workdir / f"{name}-run-config.toml", run_config)
            args += ["--run-config", str(path)]
        args += list(extra_args)
        proc, returncode, seconds, timed_out = self._cli(args, name, timeout)
        output = proc.log_path.read_text(encoding="utf-8", errors="replace")
        output = output.split("\n", 1)[1] if output.startswith("$ ") else output
        match = _RUN_ID_RE.search(output)
        run_id = int(match.group(1)) if match else None
        if timed_out and run_id is not None:
            self._cli(["stop", str(run_id), self.connection_name], f"{name}-stop", 30.0)
        status = details = None
        if run_id is not None and stream and not timed_out:
            status, details = self.run_status(run_id)
        self._remember()
        return RunResult(
            returncode, output, seconds, run_id, timed_out, proc.popen.args, status, details
        )

    def run_status(self, run_id: int, wait: float = 10.0) -> tuple[str | None, str | None]:
        """``(status, status-details)`` of a run (``flwr list --run-id``), waiting up to
        ``wait`` seconds for it to reach a ``finished:*`` status."""
        deadline = time.monotonic() + wait
        status = details = None
        while True:
            self._run_counter += 1
            proc, returncode, _, _ = self._cli(
                ["list", self.connection_name, "--run-id", str(run_id), "--format", "json"],
                f"flwr-list-{self._run_counter}",
                30.0,
            )
            text = proc.log_path.read_text(encoding="utf-8", errors="replace")
            if returncode == 0 and "{" in text:
                runs = json.loads(text[text.find("{") :]).get("runs", [])
                if runs:
                    status, details = runs[0].get("status"), runs[0].get("status-details")
            if (status or "").startswith("finished") or time.monotonic() > deadline:
                return status, details
            time.sleep(0.5)

    def list_nodes(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Nodes known to the SuperLink (``flwr supernode list --format json``)."""
        self._run_counter += 1
        proc, returncode, _, _ = self._cli(
            ["supernode", "list", self.connection_name, "--format", "json"],
            f"flwr-supernode-list-{self._run_counter}",
            timeout,
        )
        text = proc.log_path.read_text(encoding="utf-8", errors="replace")
        start = text.find("{")
        if returncode != 0 or start < 0:
            raise self._fail("`flwr supernode list` failed.", proc)
        data = json.loads(text[start:])
        return list(data.get("nodes", []))

    # ---------------------------------------------------------------- fault injection
    def kill_supernode(self, index: int, sig: int = signal.SIGKILL, tree: bool = True) -> int:
        """Send ``sig`` to SuperNode ``index`` (and, if ``tree``, all its descendants:
        its SuperExec and any running flwr-clientapp). Returns the SuperNode's PID.

        SIGKILL simulates a crash (the SuperLink only notices through missed heartbeats);
        SIGTERM is a graceful shutdown (the SuperNode deactivates itself).
        """
        proc = self.supernodes[index]
        if tree:
            self._kill_tree(proc, sig)
        else:
            _signal_pid(proc.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            try:
                proc.popen.wait(timeout=self.grace_period if sig == signal.SIGTERM else 10)
            except subprocess.TimeoutExpired:
                pass
        return proc.pid

    def _kill_tree(self, proc: ManagedProcess, sig: int) -> None:
        descendants = _descendants([proc.pid])
        self._seen.update({p: s for p, s in descendants.items() if p not in self._seen})
        if proc.alive():
            try:
                os.killpg(proc.pid, sig)  # its own process group (start_new_session)
            except (ProcessLookupError, PermissionError):
                _signal_pid(proc.pid, sig)
        for pid, start in descendants.items():
            _signal_pid(pid, sig, start)

    # ---------------------------------------------------------------- shutdown
    def leftover_pids(self) -> list[int]:
        """PIDs started by this deployment (directly or as descendants) still alive."""
        alive = {p.pid for p in self._all if p.alive()}
        alive |= {pid for pid, start in self._seen.items() if _pid_alive(pid, start)}
        alive |= set(_marked_pids(self.marker))
        alive.discard(os.getpid())
        return sorted(alive)

    def stop(self) -> None:
        """SIGTERM every process started (by PID), SIGKILL what survives the grace period."""
        self._remember()
        targets = dict(self._seen)
        targets.update(_marked_pids(self.marker))
        targets.pop(os.getpid(), None)
        own = [p for p in self._all if p.alive()]
        # SuperNodes and CLI calls first, so they do not spin reconnecting to a dead link.
        own.sort(key=lambda p: p is self.superlink)
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

    def __enter__(self) -> LocalDeployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
