"""A long-lived Flower ClientApp process: a client machine loads its backbone once per run.

In a Flower 1.41 deployment the SuperNode does not run ClientApps itself. With
``--isolation subprocess`` (the default) it starts ``flower-superexec``, which claims each
pending task on the SuperNode's Runtime API (``AcquireTask``, answered with a one-task token)
and starts a fresh ``flwr-clientapp --token ...`` process for it; that process pulls its one
message, runs the ClientApp and exits (``flwr/supernode/runtime/run_clientapp.py``). Every
round thus imports the app and loads the backbone again. With ``--isolation process`` the
SuperNode starts nothing and waits for an outside process to claim its tasks.

:class:`ClientAppProcess` is that outside process. It claims task after task itself and runs
each one *in this process* with flwr's own per-task calls (``pull_task_input``, FAB install,
ClientApp loading, ``push_message``, ``push_task_output``, task heartbeats), so the ClientApp's
module-level cache (``lightning_fed.deploy.apps._runner``: module, data, backbone) serves
every round of a run. Replies, the node's ``context.state`` and errors travel exactly as with
``flwr-clientapp``, which is why results do not change.

On a client machine (one ClientApp process next to each SuperNode)::

    flower-supernode --isolation process --port 9094 --superlink 10.0.0.1:9093 ...
    lightning-fed flower clientapp --runtime-api-address 127.0.0.1:9094 --insecure --parent-pid <supernode pid>

``--parent-pid`` makes it exit when the SuperNode exits. The Runtime API is the SuperNode's
local port: ``--insecure`` on one machine, or ``--root-certificates`` when the SuperNode serves
it over TLS (``--ssl-certfile``/``--ssl-keyfile``). With ``--superexec-auth-secret-file`` on the
SuperNode, pass the same file here (claims are then signed, as flower-superexec signs them).

A process imports an app's code once: restart it after changing the code (a new FAB of the
same app is installed, but modules already imported are not re-imported).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from logging import ERROR, INFO, WARNING
from types import FrameType

import httpx
from flwr.app import Message
from flwr.app.error import Error
from flwr.cli.install import install_from_fab
from flwr.clientapp.client_app import ClientApp, LoadClientAppError
from flwr.clientapp.utils import get_load_client_app_fn
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest, SendTaskHeartbeatRequest  # pylint: disable=E0611
from flwr.supercore import log
from flwr.supercore.app_utils import start_parent_process_monitor
from flwr.supercore.constant import SUPERNODE_DEFAULT_CLIENT_ADDRESS, TaskType
from flwr.supercore.heartbeat import HeartbeatSender
from flwr.supercore.interceptors import (
    RuntimeTokenHttpInterceptor,
    RuntimeVersionHttpInterceptor,
    SuperExecAuthHttpInterceptor,
)
from flwr.supercore.retry import RetryInvoker, make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message, push_task_output

#: What a claim may ask for: ClientApp tasks only (ServerApps run on the SuperLink's side).
CLIENT_TASKS = [TaskType.CLIENT_APP.value]
#: The Runtime API method flower-superexec signs when SuperExec auth is on.
_SIGNED_METHODS = frozenset({"/flwr.proto.Runtime/AcquireTask"})

EXIT_OK, EXIT_SIGINT, EXIT_SIGTERM = 0, 130, 143


class Stopped(BaseException):
    """SIGTERM reached the process (a BaseException, so a ClientApp's ``except Exception`` lets it through)."""


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    _ignore_stops()  # a supervisor may signal twice (e.g. the process and its group): one stop is enough
    raise Stopped


def _ignore_stops() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class ClientAppProcess:
    """Claims the ClientApp tasks of one SuperNode and runs them in this process, one by one.

    Args:
        runtime_api_address: ``host:port`` of the SuperNode's Runtime API (its ``--port``).
        insecure: Talk plain HTTP to the Runtime API (the SuperNode serves it without TLS).
        root_certificates: PEM bytes verifying the Runtime API's TLS certificate (None: the
            system's roots, ignored when ``insecure``).
        superexec_auth_secret: The SuperNode's ``--superexec-auth-secret-file`` content, if set.
        poll_interval: Seconds between claims while no task is pending.
        app: Serve this ClientApp instead of the one each task's FAB names (tests, notebooks).
    """

    def __init__(
        self,
        runtime_api_address: str = SUPERNODE_DEFAULT_CLIENT_ADDRESS,
        *,
        insecure: bool = True,
        root_certificates: bytes | None = None,
        superexec_auth_secret: bytes | None = None,
        poll_interval: float = 0.2,
        app: ClientApp | None = None,
    ) -> None:
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0 seconds, got {poll_interval}")
        self.address, self.insecure = runtime_api_address, insecure
        self.root_certificates = None if insecure else root_certificates
        self.poll_interval, self.app = poll_interval, app
        interceptors = [RuntimeVersionHttpInterceptor(component_name="SuperExec")]
        if superexec_auth_secret:
            interceptors.append(
                SuperExecAuthHttpInterceptor(master_secret=superexec_auth_secret, protected_methods=_SIGNED_METHODS)
            )
        self.control = self._client(interceptors, make_simple_http_retry_invoker())
        self._installed: set[str] = set()  # FAB hashes installed into FLWR_HOME by this process
        self.tasks_served = 0

    def _client(self, interceptors: list, retry_invoker: RetryInvoker) -> RuntimeHttpClient:
        return RuntimeHttpClient.from_server_address(
            server_address=self.address,
            insecure=self.insecure,
            root_certificates=self.root_certificates,
            interceptors=interceptors,
            retry_invoker=retry_invoker,
        )

    def task_client(self, token: str, retry_invoker: RetryInvoker) -> RuntimeHttpClient:
        """A Runtime API client for one claimed task (its token authenticates every call)."""
        interceptors = [
            RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
            RuntimeTokenHttpInterceptor(token),
        ]
        return self._client(interceptors, retry_invoker)

    # ---------------------------------------------------------------- the loop
    def serve(self, max_tasks: int | None = None, should_stop: Callable[[], bool] = lambda: False) -> int:
        """Claim and run tasks until ``max_tasks`` ran or ``should_stop()``; returns the tasks run."""
        served = 0
        while (max_tasks is None or served < max_tasks) and not should_stop():
            token = self.claim()
            if token is None:
                time.sleep(self.poll_interval)
                continue
            self.run_task(token)
            served += 1
        return served

    def claim(self) -> str | None:
        """The token of the oldest pending ClientApp task, or None if there is none."""
        res = self.control.AcquireTask(AcquireTaskRequest(supported_task_types=CLIENT_TASKS))
        if res.HasField("task") and res.token:
            return res.token
        return None

    def run_task(self, token: str) -> str:
        """Run one claimed task like ``flwr-clientapp`` does, in this process; returns its sub-status.

        An exception of the ClientApp becomes an ``Error`` reply (the server counts a failed
        client), as in ``run_clientapp``; the process goes on with the next task. A stop
        (SIGTERM/SIGINT) reports the task as failed, then propagates.
        """
        retry = task_retry_invoker()
        client = self.task_client(token, retry)
        lost = threading.Event()
        heartbeat = HeartbeatSender(_task_heartbeat(client, lost))
        message = reply = context = None
        sub_status, details = SubStatus.FAILED, "ClientApp task failed due to unknown reason"
        started = time.monotonic()
        try:
            heartbeat.start()
            message, context, run, fab = pull_task_input(client)
            app = self.app or self._load_app(run, fab)
            reply = app(message=message, context=context)
            sub_status, details = SubStatus.COMPLETED, ""
        except Exception as ex:  # noqa: BLE001 - the reply carries it, like flwr-clientapp's
            code = ErrorCode.LOAD_CLIENT_APP_EXCEPTION if isinstance(ex, LoadClientAppError) else None
            reason = f"{type(ex)}:<'{ex}'>"
            log(ERROR, "ClientApp raised an exception", exc_info=ex)
            details = reason
            if message is not None:
                reply = Message(
                    Error(code=code or ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=message
                )
        except BaseException as stop:
            retry.max_tries = 1  # stopping: do not block on a dead SuperNode
            details = f"ClientApp process stopped ({type(stop).__name__})"
            raise
        finally:
            if heartbeat.is_running:
                heartbeat.stop()  # before the task finishes: a beat after it would be refused
            try:
                if reply is not None and context is not None:
                    push_message(client, reply, context)
            except Exception as ex:  # noqa: BLE001
                log(ERROR, "Failed to push the reply message", exc_info=ex)
                sub_status = SubStatus.FAILED
            push_task_output(client=client, context=context, sub_status=sub_status, details=details)
            client.close()
        if lost.is_set():
            log(WARNING, "The SuperNode gave this task up while it ran (missed heartbeats); its reply may be dropped")
        kind = message.metadata.message_type if message is not None else "?"
        log(INFO, "[lightning-fed clientapp] task %s %s in %.2fs", kind, sub_status, time.monotonic() - started)
        self.tasks_served += 1
        return sub_status

    def _load_app(self, run, fab) -> ClientApp:  # noqa: ANN001 - flwr's Run and Fab
        """The ClientApp the task's FAB names, installed once per FAB into ``FLWR_HOME``."""
        if fab.hash_str not in self._installed:
            install_from_fab(fab.content, skip_prompt=True)
            self._installed.add(fab.hash_str)
        load = get_load_client_app_fn(default_app_ref="", app_path=None, multi_app=True)
        return load(run.fab_id, run.fab_version, fab.hash_str)  # flwr reuses modules already imported

    def close(self) -> None:
        self.control.close()


def task_retry_invoker() -> RetryInvoker:
    """flwr's Runtime API retries (``make_simple_http_retry_invoker``), except that a refused token
    (HTTP 401/403: the task or its run is over, e.g. ``flwr stop``) fails this task instead of the
    process: flwr's invoker raises SIGINT or ``RunNotRunningException`` (a BaseException) there,
    right for a one-task ``flwr-clientapp``, fatal for a process serving every task of the node."""
    invoker = make_simple_http_retry_invoker()
    flwr_giveup = invoker.should_giveup

    def giveup(exc: Exception) -> bool:
        if isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code in (401, 403):
            return True
        return flwr_giveup(exc) if flwr_giveup is not None else False

    invoker.should_giveup = giveup
    return invoker


def _task_heartbeat(client: RuntimeHttpClient, lost: threading.Event) -> Callable[[], bool]:
    """flwr's task heartbeat (``make_task_heartbeat_fn_http``), except that a refused beat marks
    the task as lost instead of raising SIGINT, which would end this long-lived process."""
    request = SendTaskHeartbeatRequest()

    def beat() -> bool:
        try:
            res = client.SendTaskHeartbeat(request)
        except httpx.HTTPStatusError as err:
            if err.response.status_code in (401, 403):  # the token is no longer valid
                lost.set()
                return True
            return False  # retried with backoff by the HeartbeatSender
        except httpx.HTTPError:
            return False
        if not res.success:
            lost.set()
        return True

    return beat


# ------------------------------------------------------------------------------ the process
def serve(args: argparse.Namespace, certificates: bytes | None, secret: bytes | None) -> int:
    """Serve a SuperNode's ClientApp tasks until stopped (``lightning-fed flower clientapp``'s arguments,
    checked by :mod:`lightning_fed.deploy.flower_command`); returns the exit status."""
    if args.parent_pid is not None:
        start_parent_process_monitor(args.parent_pid)  # raises SIGINT here when the SuperNode is gone
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    # flwr's logger prints through a handler of its own; a library's `logging.basicConfig` at
    # import (opacus', reached when a task loads the app) gives the root logger one as well,
    # and every record would print twice.
    logging.getLogger("flwr").propagate = False
    worker = ClientAppProcess(
        args.runtime_api_address,
        insecure=args.insecure,
        root_certificates=certificates,
        superexec_auth_secret=secret,
        poll_interval=args.poll_interval,
    )
    log(
        INFO,
        "[lightning-fed clientapp] serving the ClientApp tasks of %s (pid %d)",
        args.runtime_api_address,
        os.getpid(),
    )
    code = EXIT_OK
    try:
        worker.serve(max_tasks=args.max_tasks)
    except Stopped:
        code = EXIT_SIGTERM
    except KeyboardInterrupt:
        _ignore_stops()
        code = EXIT_SIGINT
    finally:
        worker.close()
    log(INFO, "[lightning-fed clientapp] stopped after %d task(s)", worker.tasks_served)
    return code
