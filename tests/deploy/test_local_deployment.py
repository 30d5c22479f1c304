"""End-to-end tests of LocalDeployment: a real Flower deployment (SuperLink, SuperNodes,
``flwr run``) as local processes, with the toy app in ``tests/deploy/toy_app``.

The toy ClientApp adds ``partition-id + 1`` to the array it receives; the toy ServerApp
averages the replies (hand-written FedAvg over ``grid.send_and_receive``) and writes a
JSON report (per round: ok / error replies / missing nodes, and the final array) to the
run-config value ``output-path``.

A SuperNode crashed (SIGKILL) while the server waits gives no reply, so the round goes on
after its timeout: ``tests/deploy/test_flower_deployment.py`` shows it with the real app (a
node killed mid-round is a failed client and the run continues), which is also where the
deployment runs over TLS with SuperNode authentication.
"""

import json
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from lightning_fed.deploy.local_deployment import LocalDeployment  # noqa: E402
from lightning_fed.deploy.processes import _descendants, _pid_alive  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")

TOY_APP = Path(__file__).parent / "toy_app"
NODE_UNAVAILABLE = 5  # flwr.common.constant.ErrorCode.NODE_UNAVAILABLE


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


def _started_pids(dep: LocalDeployment) -> set[int]:
    return {p.pid for p in dep._all} | set(dep._seen)


def _assert_all_gone(dep: LocalDeployment, pids: set[int]) -> None:
    assert dep.leftover_pids() == []
    assert not [pid for pid in pids if _pid_alive(pid, dep._seen.get(pid))]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_two_nodes_two_rounds_and_cleanup(tmp_path):
    out = tmp_path / "result.json"
    t0 = time.monotonic()
    with LocalDeployment(TOY_APP, num_supernodes=2, workdir=tmp_path / "dep") as dep:
        assert all(dep.node_ids) and len(set(dep.node_ids)) == 2
        assert (dep.cli_flwr_home / "config.toml").is_file()

        # A failing ServerApp: `flwr run --stream` still exits 0, the status tells.
        failed = dep.run({"server-raise": True}, timeout=1800)
        assert failed.returncode == 0 and failed.status == "finished:failed", failed.output
        assert not failed.ok
        assert "server-raise=true" in (failed.status_details or "")

        result = dep.run({"output-path": str(out), "num-rounds": 2}, timeout=1800)
        assert result.ok, (result.status, result.status_details, result.output)
        pids = _started_pids(dep)
    elapsed = time.monotonic() - t0

    report = _report(out)
    # round 1: mean(0+1, 0+2) = 1.5; round 2: mean(1.5+1, 1.5+2) = 3.0
    assert report["final"] == [[3.0, 3.0, 3.0]]
    assert [r["round"] for r in report["rounds"]] == [1, 2]
    for rnd in report["rounds"]:
        assert sorted(rnd["ok"]) == sorted(str(n) for n in dep.node_ids)
        assert rnd["errors"] == {} and rnd["missing"] == []
    # Every process started (SuperLink, SuperNodes, their SuperExecs, flwr-serverapp,
    # flwr-clientapp, flwr CLI calls) is gone once the context has exited.
    assert dep.superlink is not None and dep.superlink.pid in pids
    _assert_all_gone(dep, pids)
    print(f"2 nodes x 2 rounds incl. a failing run: {elapsed:.1f}s end to end")


def _kill_during_round(dep: LocalDeployment, index: int, sig: int, run_config: dict):
    """Start the run in a thread, kill SuperNode ``index`` while its ClientApp runs."""
    box = {}
    thread = threading.Thread(target=lambda: box.update(r=dep.run(run_config, timeout=1800)))
    thread.start()
    deadline = time.monotonic() + 1800
    while not any("flwr-clientapp" in _cmdline(pid) for pid in _descendants([dep.supernodes[index].pid])):
        assert time.monotonic() < deadline, "flwr-clientapp never started"
        assert thread.is_alive(), box.get("r")
        time.sleep(0.1)
    dep.kill_supernode(index, sig)
    killed_at = time.monotonic()
    thread.join()
    return box["r"], killed_at


def test_stopped_supernode_during_round_is_an_error_reply(tmp_path):
    """SIGTERM one SuperNode while its ClientApp is running: the SuperNode deactivates
    itself, and the server promptly gets an error reply NODE_UNAVAILABLE (code 5) for it
    instead of waiting for ``round-timeout``; the next round is sent only to the live node. The
    time-out is far past any round on a busy machine: only the error reply (not a missing node)
    can close round 1 with the dead node counted, so no wall time is asserted."""
    out = tmp_path / "result.json"
    timeout = 1800.0
    with LocalDeployment(TOY_APP, num_supernodes=2, workdir=tmp_path / "dep") as dep:
        alive_id, dead_id = dep.node_ids
        result, _ = _kill_during_round(
            dep,
            1,
            signal.SIGTERM,
            {"output-path": str(out), "round-timeout": timeout, "train-sleep": 3.0},
        )
        assert result.ok, result.output
        pids = _started_pids(dep)

    round1, round2 = _report(out)["rounds"]
    assert round1["ok"] == [str(alive_id)]
    assert round1["errors"][str(dead_id)]["code"] == NODE_UNAVAILABLE
    assert round1["missing"] == []  # answered by the error reply, not cut by the time-out
    assert round2["sent_to"] == [alive_id] and round2["ok"] == [str(alive_id)]
    assert _report(out)["final"] == [[2.0, 2.0, 2.0]]
    _assert_all_gone(dep, pids)


@pytest.mark.slow
def test_crashed_supernode_during_round_becomes_error_after_heartbeat_expiry(tmp_path):
    """SIGKILL during a round with a long round-timeout: the SuperLink answers with
    NODE_UNAVAILABLE once the node missed 2 heartbeats (interval hard-coded to 30 s in
    flwr 1.41), i.e. up to ~60 s after the crash."""
    out = tmp_path / "result.json"
    with LocalDeployment(TOY_APP, num_supernodes=2, workdir=tmp_path / "dep") as dep:
        alive_id, dead_id = dep.node_ids
        result, killed_at = _kill_during_round(
            dep,
            1,
            signal.SIGKILL,
            {"output-path": str(out), "round-timeout": 150.0, "train-sleep": 3.0},
        )
        assert result.ok, result.output
        pids = _started_pids(dep)

    round1, round2 = _report(out)["rounds"]
    assert round1["errors"][str(dead_id)]["code"] == NODE_UNAVAILABLE
    assert round1["seconds"] < 100
    assert round2["sent_to"] == [alive_id]
    _assert_all_gone(dep, pids)
