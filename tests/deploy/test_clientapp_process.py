"""The long-lived ClientApp process's loop (``deploy/clientapp_process.py``) against a fake
SuperNode Runtime API: each claimed task runs in this process with the same ClientApp object,
a ClientApp error becomes an error reply and the loop goes on, a stop reports the task as
failed and propagates, a refused heartbeat does not end the process. Plus the command line's
bad input. The real deployment is ``test_clientapp_deployment.py``.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskResponse, SendTaskHeartbeatResponse  # pylint: disable=E0611
from flwr.proto.task_pb2 import Task  # pylint: disable=E0611
from flwr.supercore.task_identity import TaskIdentity

from lightning_fed.deploy import clientapp_process, flower_command
from lightning_fed.deploy.clientapp_process import ClientAppProcess, Stopped, _task_heartbeat


class FakeControl:
    """``AcquireTask`` of a SuperNode holding ``tokens`` pending tasks."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.asked = list(tokens), []

    def AcquireTask(self, request):  # noqa: N802 - flwr's method name
        self.asked.append(list(request.supported_task_types))
        if not self.tokens:
            return AcquireTaskResponse()
        token = self.tokens.pop(0)
        return AcquireTaskResponse(task=Task(task_id=len(self.asked), type="flwr-clientapp"), token=token)

    def close(self) -> None:
        pass


class FakeTaskClient:
    def __init__(self, token: str) -> None:
        self.token, self.closed = token, False

    def SendTaskHeartbeat(self, request):  # noqa: N802
        return SendTaskHeartbeatResponse(success=True)

    def close(self) -> None:
        self.closed = True


def _doubling_app() -> tuple[ClientApp, list[int]]:
    """A ClientApp replying ``2 * x``; ``x < 0`` raises. Records the values it saw."""
    app, seen = ClientApp(), []

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        x = int(msg.content.config_records["c"]["x"])
        if x == 99:
            raise Stopped  # what SIGTERM raises in the process
        if x < 0:
            raise ValueError(f"negative x={x}")
        seen.append(x)
        context.state["c"] = ConfigRecord({"calls": len(seen)})
        return Message(RecordDict({"c": ConfigRecord({"y": 2 * x})}), reply_to=msg)

    return app, seen


@pytest.fixture
def fake_node(monkeypatch):
    """Tokens ``x=<int>`` carry the message's ``x``; records what is pushed back."""
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    pushed = {"replies": [], "outputs": [], "clients": []}
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})

    def pull(client):
        msg = Message(
            RecordDict({"c": ConfigRecord({"x": int(client.token[2:])})}), dst_node_id=1, message_type="train"
        )
        msg.metadata.__dict__["_message_id"] = msg.object_id
        return msg, context, None, None

    monkeypatch.setattr(clientapp_process, "pull_task_input", pull)
    monkeypatch.setattr(clientapp_process, "push_message", lambda c, reply, ctx: pushed["replies"].append(reply))
    monkeypatch.setattr(
        clientapp_process,
        "push_task_output",
        lambda client, context, sub_status, details: pushed["outputs"].append((sub_status, details)),
    )

    def task_client(self, token, retry):
        pushed["clients"].append(FakeTaskClient(token))
        return pushed["clients"][-1]

    monkeypatch.setattr(ClientAppProcess, "task_client", task_client)
    return pushed, context


def _process(tokens: list[str], app: ClientApp) -> ClientAppProcess:
    proc = ClientAppProcess("127.0.0.1:1", poll_interval=0.01, app=app)
    proc.control = FakeControl(tokens)
    return proc


def test_tasks_run_in_this_process_and_an_error_becomes_an_error_reply(fake_node):
    pushed, context = fake_node
    app, seen = _doubling_app()
    proc = _process(["x=3", "x=-1", "x=5"], app)
    assert proc.serve(max_tasks=3) == 3 and proc.tasks_served == 3
    assert proc.control.asked == [["flwr-clientapp"]] * 3  # claims ClientApp tasks only

    assert seen == [3, 5]  # the same app object ran both good tasks, in this process
    assert [status for status, _ in pushed["outputs"]] == [SubStatus.COMPLETED, SubStatus.FAILED, SubStatus.COMPLETED]
    assert "negative x=-1" in pushed["outputs"][1][1]
    ok, failed, ok2 = pushed["replies"]
    assert ok.content.config_records["c"]["y"] == 6 and ok2.content.config_records["c"]["y"] == 10
    assert failed.has_error() and failed.error.code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    assert "negative x=-1" in failed.error.reason
    assert context.state.config_records["c"]["calls"] == 2  # the node's state goes back with the output
    assert all(c.closed for c in pushed["clients"])

    # Nothing pending: it polls until told to stop, and runs nothing.
    polls = iter(range(3))
    assert proc.serve(should_stop=lambda: next(polls, None) is None) == 0
    assert len(proc.control.asked) == 3 + 3


def test_a_stop_during_a_task_reports_it_failed_and_ends_the_loop(fake_node):
    pushed, _ = fake_node
    app, seen = _doubling_app()
    proc = _process(["x=1", "x=99", "x=2"], app)
    with pytest.raises(Stopped):
        proc.serve()
    assert seen == [1] and proc.control.tokens == ["x=2"]  # the third task stays pending for a successor
    assert [status for status, _ in pushed["outputs"]] == [SubStatus.COMPLETED, SubStatus.FAILED]
    assert pushed["outputs"][1][1] == "ClientApp process stopped (Stopped)"
    assert len(pushed["replies"]) == 1 and all(c.closed for c in pushed["clients"])


def test_a_refused_heartbeat_marks_the_task_lost_instead_of_ending_the_process():
    class Client:
        def __init__(self, answer):
            self.answer = answer

        def SendTaskHeartbeat(self, request):  # noqa: N802
            if isinstance(self.answer, Exception):
                raise self.answer
            return SendTaskHeartbeatResponse(success=self.answer)

    lost = clientapp_process.threading.Event()
    assert _task_heartbeat(Client(True), lost)() is True and not lost.is_set()
    assert _task_heartbeat(Client(httpx.ConnectError("down")), lost)() is False  # retried with backoff
    assert _task_heartbeat(Client(False), lost)() is True and lost.is_set()  # flwr's raises SIGINT here
    lost.clear()
    assert _task_heartbeat(Client(_status_error(403)), lost)() is True and lost.is_set()


def _status_error(code: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1:1/flwr.proto.Runtime/PullTaskInput")
    return httpx.HTTPStatusError(f"{code}", request=request, response=httpx.Response(code, request=request))


def test_a_refused_token_fails_the_task_not_the_process():
    """flwr's invoker raises SIGINT on 401 and RunNotRunningException on 403 (both end a
    process); here both end the call, and so the task, with the HTTP error."""
    giveup = clientapp_process.task_retry_invoker().should_giveup
    assert giveup(_status_error(401)) is True and giveup(_status_error(403)) is True
    assert giveup(_status_error(503)) is False and giveup(httpx.ConnectError("not up yet")) is False
    assert giveup(_status_error(400)) is True


def test_bad_command_line_is_a_one_line_error(tmp_path, capsys):
    empty = tmp_path / "secret"
    empty.write_bytes(b"")
    for argv, message in [
        (["--poll-interval", "0"], "--poll-interval must be > 0 seconds, got 0.0"),
        (["--max-tasks", "0"], "--max-tasks must be >= 1, got 0"),
        (["--superexec-auth-secret-file", str(empty)], f"--superexec-auth-secret-file '{empty}' is empty"),
        (
            ["--root-certificates", str(tmp_path / "no.pem")],
            f"--root-certificates '{tmp_path / 'no.pem'}' cannot be read: No such file or directory",
        ),
        (["--parent-pid", "999999999"], "--parent-pid 999999999 is not a running process"),
    ]:
        assert flower_command.main(["clientapp", *argv]) == flower_command.EXIT_USAGE, argv
        assert capsys.readouterr().err == f"error: {message}\n"


def test_local_deployment_isolation_is_checked_before_anything_starts(tmp_path):
    from lightning_fed.deploy.local_deployment import LocalDeployment

    with pytest.raises(ValueError, match=r"isolation must be one of \('subprocess', 'process'\), got 'thread'"):
        LocalDeployment(tmp_path, isolation="thread")
    assert list(tmp_path.iterdir()) == []


def test_cli_rejects_a_bad_runtime_api_address():
    cmd = [
        sys.executable,
        "-m",
        "lightning_fed.cli",
        "flower",
        "clientapp",
        "--runtime-api-address",
        "nope",
        "--insecure",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[0] == "error: --runtime-api-address must be host:port, got 'nope'"
    assert proc.stdout == ""


ARGUMENT_ERRORS = {  # seventh outside run (a8debca): argparse's usage block first (8 lines for --parent-pid abc)
    "parent_pid_word": (
        ["clientapp", "--parent-pid", "abc"],
        "argument --parent-pid: invalid int value: 'abc'",
        "lightning-fed flower clientapp",
    ),
    "no_subcommand": ([], "the following arguments are required: {clientapp}", "lightning-fed flower"),
    "typo": (
        ["clientap"],
        "argument {clientapp}: invalid choice: 'clientap' (choose from 'clientapp')",
        "lightning-fed flower",
    ),
}


@pytest.mark.parametrize(("argv", "line", "prog"), list(ARGUMENT_ERRORS.values()), ids=list(ARGUMENT_ERRORS))
def test_an_argument_error_is_one_line_and_the_tip_as_report_s(tmp_path, argv, line, prog):
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", "flower", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (
        2,
        f"error: {line}\ntip: {prog} --help lists every option\n",
        "",
    )
    assert list(tmp_path.iterdir()) == []
