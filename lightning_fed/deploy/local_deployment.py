"""Run a Flower *deployment* (SuperLink + N SuperNodes + ``flwr run``) as local processes.

Written and tested against flwr 1.41.0, where (unlike older releases) the SuperLink
serves the Control, Fleet and Runtime APIs over HTTP on a single ``--host/--port``, and
the ``flwr`` CLI reads its SuperLink connections from ``$FLWR_HOME/config.toml`` (see
:mod:`~lightning_fed.deploy.flower_cli`).

Security, as on separate machines: with ``tls=True`` a private CA and a SuperLink certificate
are made in ``workdir/tls`` (:func:`~lightning_fed.deploy.tls.make_certificates`), the
SuperLink serves HTTPS and the SuperNodes and the ``flwr`` CLI verify it against that CA; with
``supernode_auth=True`` (needs TLS) the SuperLink runs with ``--enable-supernode-auth``, each
SuperNode gets its own key pair, its public key is registered with ``flwr supernode register``
before it starts, and it signs its requests with its private key. Without ``tls`` everything
runs ``--insecure`` (plain HTTP on 127.0.0.1).

Process tree in the default ``subprocess`` isolation mode (all resolved through ``PATH``,
which is why the environment's ``bin`` folder is put first on it)::

    flower-superlink [--insecure | --ssl-*] --host H --port P [--enable-supernode-auth]
      └─ flower-superexec --runtime-api-address H:P --parent-pid <superlink>   (new session!)
           └─ flwr-serverapp ...            one per run
    flower-supernode [--insecure | --root-certificates CA] --superlink H:P --port Q
                     [--auth-supernode-private-key K] --node-config "k=v ..."
      └─ flower-superexec --runtime-api-address H:Q --parent-pid <supernode>
           └─ flwr-clientapp ...            one per *message* (i.e. per round)

With ``isolation="process"`` a SuperNode has no SuperExec: beside it, one long-lived ``lightning-fed flower
clientapp --runtime-api-address H:Q --parent-pid <supernode>`` runs all its messages (deploy/clientapp_process.py).

The SuperLink starts its SuperExec in a new session, out of reach of its process group;
:meth:`LocalDeployment.stop` finds every descendant through ``/proc`` (and a marker variable
all children inherit, for orphans re-parented to init) and kills them by PID. Linux only.

Example::

    with LocalDeployment("path/to/app", num_supernodes=2, workdir=tmp, tls=True, supernode_auth=True) as dep:
        result = dep.run({"num-server-rounds": 2, "output-path": str(tmp / "out.json")})
        assert result.ok, result.output
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_fed.deploy.flower_cli import FlwrCommands, RunResult, format_config_string, write_cli_config, write_toml
from lightning_fed.deploy.processes import ManagedProcess, ProcessGroup, _port_open, _signal_pid, free_port
from lightning_fed.deploy.tls import (
    SuperNodeKey,
    TlsFiles,
    make_certificates,
    make_supernode_key,
    superlink_security_args,
    supernode_security_args,
)

__all__ = ["DeploymentError", "LocalDeployment", "ManagedProcess", "RunResult", "format_config_string"]


#: Environment set for every process started (on top of the caller's environment).
BASE_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "PYTHONUNBUFFERED": "1",
}

ISOLATION_MODES = ("subprocess", "process")
_SUPERNODE_ID_RE = re.compile(r"SuperNode ID: (\d+)")


class DeploymentError(RuntimeError):
    """A process of the deployment failed to start or died unexpectedly."""


class LocalDeployment(FlwrCommands):
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
        tls: serve the SuperLink over TLS: True makes a private CA and a certificate for ``host``
            in ``workdir/tls``, or give your own :class:`~lightning_fed.deploy.tls.TlsFiles`; False: ``--insecure``.
        supernode_auth: only registered SuperNodes may connect (``--enable-supernode-auth``);
            each SuperNode gets a key pair in ``workdir/keys``, registered with
            ``flwr supernode register`` before it starts. Needs ``tls``.
        isolation: ``subprocess`` (Flower's default: a ``flwr-clientapp`` per message) or
            ``process`` (a long-lived ``lightning-fed flower clientapp`` per SuperNode).
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
        tls: bool | TlsFiles = False,
        supernode_auth: bool = False,
        isolation: str = "subprocess",
    ) -> None:
        if isolation not in ISOLATION_MODES:
            raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {isolation!r}")
        if supernode_auth and not tls:
            raise ValueError(
                "supernode_auth=True needs tls (Flower authenticates SuperNodes only over TLS), got tls=False"
            )
        self.app_dir = Path(app_dir).resolve()
        if not (self.app_dir / "pyproject.toml").is_file():
            raise FileNotFoundError(f"No pyproject.toml in app folder {self.app_dir}")
        if node_configs is None:
            node_configs = [{"partition-id": i, "num-partitions": num_supernodes} for i in range(num_supernodes)]
        if len(node_configs) != num_supernodes:
            raise ValueError(f"{len(node_configs)} node configs given for {num_supernodes} SuperNodes")
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
        self.poll_interval = superexec_poll_interval or 1.0  # also the ClientApp processes' (isolation="process")
        self.bin_dir = Path(bin_dir) if bin_dir else Path(sys.executable).parent
        self.tls: TlsFiles | None = tls if isinstance(tls, TlsFiles) else None
        self._make_tls = tls is True
        self.supernode_auth = supernode_auth
        self.supernode_keys: list[SuperNodeKey] = []
        self.isolation = isolation
        self.clientapps: list[ManagedProcess] = []  # isolation="process": one per SuperNode, by index

        self.procs = ProcessGroup(self.workdir / "logs", grace_period)
        self.superlink: ManagedProcess | None = None
        self.supernodes: list[ManagedProcess] = []
        self._run_counter = 0

    # ---------------------------------------------------------------- paths / env
    @property
    def logs_dir(self) -> Path:
        return self.procs.logs_dir

    @property
    def _all(self) -> list[ManagedProcess]:
        """Every process started (SuperLink, SuperNodes, ``flwr`` CLI calls)."""
        return self.procs.started

    @property
    def _seen(self) -> dict[int, int]:
        """pid -> start time of every process seen, descendants included."""
        return self.procs.seen

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
        return env

    def write_flower_config(self) -> Path:
        """Write ``$FLWR_HOME/config.toml`` of the CLI: one connection, over TLS if enabled."""
        ca = self.tls.ca_cert if self.tls is not None else None
        return write_cli_config(self.cli_flwr_home, self.connection_name, self.superlink_address, ca)

    # ---------------------------------------------------------------- processes
    def _spawn(self, name: str, cmd: list[str], flwr_home: Path, port: int | None = None) -> ManagedProcess:
        return self.procs.spawn(name, cmd, self._env(flwr_home), self.workdir, flwr_home, port)

    def _remember(self, pids: Sequence[int] = ()) -> None:
        self.procs.remember(pids)

    def _fail(self, message: str, *procs: ManagedProcess) -> DeploymentError:
        details = "\n".join(
            f"--- {p.name} (pid {p.pid}, exit code {p.popen.poll()}) log tail: {p.log_path}\n{p.log_tail()}"
            for p in procs
        )
        return DeploymentError(f"{message}\n{details}")

    def start(self) -> LocalDeployment:
        """Start the SuperLink and SuperNodes and wait until all nodes are connected."""
        if self.superlink is not None:
            raise RuntimeError("LocalDeployment already started")
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self._make_tls:
            self.tls = make_certificates(self.workdir / "tls", hosts=[self.host, "localhost"])
        try:
            self._start_superlink()
            self.write_flower_config()
            if self.supernode_auth:
                self._register_supernodes()
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
            *superlink_security_args(self.tls, self.supernode_auth),
            "--host",
            self.host,
            "--port",
            str(port),
        ]
        self.superlink = self._spawn("superlink", cmd, self.workdir / "flwr_home" / "superlink", port)
        deadline = time.monotonic() + self.startup_timeout
        while not _port_open(self.host, port):
            if not self.superlink.alive():
                raise self._fail("SuperLink exited during startup.", self.superlink)
            if time.monotonic() > deadline:
                raise self._fail(
                    f"SuperLink not listening on {self.host}:{port} after {self.startup_timeout:.0f}s.",
                    self.superlink,
                )
            time.sleep(0.2)

    def _register_supernodes(self) -> None:
        """Make each SuperNode's key pair and register its public key with the SuperLink
        (``flwr supernode register``, all at once: each call is a CLI process start)."""
        calls = []
        for index in range(self.num_supernodes):
            key = make_supernode_key(self.workdir / "keys", f"supernode-{index}")
            self.supernode_keys.append(key)
            cmd = [self._exe("flwr"), "supernode", "register", str(key.public_key), self.connection_name]
            calls.append(self._spawn(f"flwr-supernode-register-{index}", cmd, self.cli_flwr_home))
        for index, proc in enumerate(calls):
            try:
                returncode = proc.popen.wait(timeout=self.startup_timeout)
            except subprocess.TimeoutExpired:
                self._kill_tree(proc, signal.SIGKILL)
                returncode = None
            if returncode != 0:
                raise self._fail(
                    f"`flwr supernode register` of supernode-{index} failed (exit code {returncode}).",
                    proc,
                    self.superlink,
                )

    def _node_config_arg(self, index: int) -> str:
        config = self.node_configs[index]
        inline = format_config_string(config)
        if inline is not None:
            return inline
        return str(write_toml(self.workdir / f"node-config-{index}.toml", config))

    def _start_supernode(self, index: int) -> ManagedProcess:
        port = free_port(self.host)
        key = self.supernode_keys[index] if self.supernode_auth else None
        cmd = [self._exe("flower-supernode"), *supernode_security_args(self.tls, key), "--superlink"]
        cmd += [self.superlink_address, "--host", self.host, "--port", str(port), "--isolation", self.isolation]
        if self.node_configs[index]:
            cmd += ["--node-config", self._node_config_arg(index)]
        # Each SuperNode gets its own FLWR_HOME (as on separate machines); this also
        # avoids two flwr-clientapp processes installing the same FAB concurrently.
        proc = self._spawn(f"supernode-{index}", cmd, self.workdir / "flwr_home" / f"supernode-{index}", port)
        self.supernodes.append(proc)
        if self.isolation == "process":  # the node's ClientApp process, claiming tasks on its Runtime API
            app = [self._exe("lightning-fed"), "flower", "clientapp", "--runtime-api-address", f"{self.host}:{port}"]
            app += ["--insecure", "--parent-pid", str(proc.pid), "--poll-interval", str(self.poll_interval)]
            self.clientapps.append(self._spawn(f"clientapp-{index}", app, proc.flwr_home))
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
                    f"{len(pending)} SuperNode(s) not connected after {self.startup_timeout:.0f}s.",
                    *pending,
                    self.superlink,
                )
            time.sleep(0.2)
        self._remember()

    # ---------------------------------------------------------------- fault injection
    def kill_supernode(self, index: int, sig: int = signal.SIGKILL, tree: bool = True) -> int:
        """Send ``sig`` to SuperNode ``index`` (and, if ``tree``, all its descendants:
        its SuperExec and any running flwr-clientapp, or its ClientApp process). Returns the SuperNode's PID.

        SIGKILL simulates a crash (the SuperLink only notices through missed heartbeats);
        SIGTERM is a graceful shutdown (the SuperNode deactivates itself).
        """
        proc = self.supernodes[index]
        if tree and self.clientapps:
            self._kill_tree(self.clientapps[index], sig)
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
        self.procs.kill_tree(proc, sig)

    # ---------------------------------------------------------------- shutdown
    def leftover_pids(self) -> list[int]:
        """PIDs started by this deployment (directly or as descendants) still alive."""
        return self.procs.leftover_pids()

    def stop(self) -> None:
        """SIGTERM every process started (by PID), SIGKILL what survives the grace period.

        SuperNodes and CLI calls go first, so they do not spin reconnecting to a dead SuperLink.
        """
        self.procs.stop(last=self.superlink)

    def __enter__(self) -> LocalDeployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
