"""Talking to a Flower deployment through the ``flwr`` CLI: its ``config.toml``, config strings
and files, and the outcome of ``flwr run``.

In flwr 1.41 the ``flwr`` CLI reads its SuperLink connections from ``$FLWR_HOME/config.toml``::

    [superlink]
    default = "<name>"

    [superlink.<name>]
    address = "127.0.0.1:<superlink port>"
    root-certificates = "/abs/path/ca.crt"     # TLS; or `insecure = true` without it
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_fed.deploy.processes import ManagedProcess

_SAFE_BARE_STRING = re.compile(r"^[^\s'\"=]*$")
_RUN_ID_RE = re.compile(r"Successfully started run (\d+)")


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


def write_toml(path: Path, config: Mapping[str, Any]) -> Path:
    """Write ``config`` as a TOML file (run config, node config) and return its path."""
    import tomli_w  # a dependency of flwr

    path.write_text(tomli_w.dumps(dict(config)), encoding="utf-8")
    return path


def write_cli_config(flwr_home: Path, name: str, address: str, root_certificates: Path | None) -> Path:
    """Write ``$FLWR_HOME/config.toml`` with one SuperLink connection ``name`` (the default):
    over TLS verified with ``root_certificates`` (a CA file), or insecure when it is None."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    connection: dict[str, Any] = {"address": address}
    if root_certificates is None:
        connection["insecure"] = True
    else:
        connection["root-certificates"] = str(Path(root_certificates).resolve())  # flwr requires an absolute path
    return write_toml(flwr_home / "config.toml", {"superlink": {"default": name, name: connection}})


class FlwrCommands:
    """``flwr`` CLI calls against a running deployment: ``run``, ``list``, ``supernode list``.

    A mixin of :class:`~lightning_fed.deploy.local_deployment.LocalDeployment`, which provides
    the attributes below and ``_spawn``, ``_exe``, ``_kill_tree``, ``_remember`` and ``_fail``:
    each call is started as one of its processes, so a call that hangs is killed like any other.
    """

    app_dir: Path
    workdir: Path
    connection_name: str
    cli_flwr_home: Path
    superlink: ManagedProcess | None
    _run_counter: int

    def _cli(self, args: list[str], name: str, timeout: float | None) -> tuple[ManagedProcess, int | None, float, bool]:
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
            path = write_toml(self.workdir / f"{name}-run-config.toml", run_config)
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
        return RunResult(returncode, output, seconds, run_id, timed_out, proc.popen.args, status, details)

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
