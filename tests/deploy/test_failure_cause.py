"""A round that fails because its clients failed names the first client's cause in its one error
line (issue 41 item 11): Ray killing workers for memory used to end with ``only 0 of 2 clients
returned a valid update`` and nothing else."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from uuid import uuid4

import pytest
import torch
from flwr.app import Error, Message
from flwr.common.constant import ErrorCode
from ray.exceptions import OutOfMemoryError

from lightning_fed.deploy.apps import load_run
from lightning_fed.deploy.failure_cause import OOM_ADVICE, WHAT_TO_CHANGE, failure_cause
from lightning_fed.deploy.records import update_to_record
from lightning_fed.deploy.server import FederatedServer
from lightning_fed.federation import ServerRound
from lightning_fed.strategies import FedAvg
from tests.deploy.test_server_replies import NUM_CLIENTS, SAMPLED, ScriptedGrid, honest_eval, honest_update

ROOT = Path(__file__).resolve().parents[2]
RAY_OOM = (  # the reason of Flower's error reply when Ray's memory monitor killed the worker
    "<class 'ray.exceptions.OutOfMemoryError'>:<'Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 10.0.0.2, ID: 5f1c) where the task (actor ID: 9a, name=ClientAppActor.__init__,"
    " pid=4242) was running was 7.52GB / 7.77GB (0.968), which exceeds the memory usage threshold of 0.95."
    " Ray killed this worker (ID: 77) because it was the most recently scheduled task.'>"
)


def test_ray_killing_a_worker_for_memory_is_named_with_what_to_change():
    assert (
        failure_cause(RAY_OOM)
        == f"{OOM_ADVICE} (OutOfMemoryError: Task was killed due to the node running low on memory.)"
    )


def test_a_client_exception_keeps_its_type_and_first_sentence():
    reason = "<class 'flwr.clientapp.client_app.ClientAppException'>:<'ValueError: bad shard.\nTraceback ...'>"
    assert failure_cause(reason) == "ClientAppException: ValueError: bad shard."
    assert failure_cause("") == "no reason given"
    assert len(failure_cause("x" * 5000)) == 300


def test_the_round_error_names_the_first_failed_clients_cause():
    server = ServerRound(FedAvg(), [], rounds=1, clients_per_round=2, min_clients=1, seed=0)
    server.bind(2)
    server.global_state = {"w": torch.zeros(1)}
    server.open(0, [0, 1])
    server.send(0), server.send(1)
    server.fail(0, failure_cause(RAY_OOM))
    server.fail(1, failure_cause(RAY_OOM))
    with pytest.raises(RuntimeError) as raised:
        server.close(SimpleNamespace(is_global_zero=True, loggers=[]), SimpleNamespace(load_state=lambda s: None))
    assert str(raised.value) == (
        "round 1: only 0 of 2 clients returned a valid update, fewer than federation.min_clients=1"
        f" (failed: [0, 1], rejected: []); client 0 failed: {failure_cause(RAY_OOM)}"
    )


# What Flower 1.41's simulation engine (server/superlink/fleet/vce/vce_api.py, ``worker``) makes of
# the exception ``ray.get`` raised when Ray 2.55's memory monitor killed a ClientApp's worker, as
# seen in a real run (``test_ray_killing_the_workers_for_memory_ends_the_run_in_one_line``; the
# memory figures and ids shortened).
RAY_KILLED = (
    "1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 192.0.2.2, ID: 6550)"
    " was 5.63GB / 23.54GB (0.239197), which exceeds the memory usage threshold of 0.010000; Ray killed 1"
    " worker(s) based on the killing policy: [(Task: job ID=01000000, task name=ClientAppActor.__init__,"
    " required resources={CPU: 1}, pid=12172, actual memory used=0.05GB)]; Refer to the documentation on how"
    " to address the out of memory issue: https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html."
)


def flower_error(msg: Message) -> Message:
    """Flower's error reply to ``msg`` when Ray killed the worker running its ClientApp."""
    reason = str(OutOfMemoryError) + ":<'" + RAY_KILLED + "'>"  # vce_api.worker's format
    return Message(Error(code=ErrorCode.UNKNOWN, reason=reason), reply_to=msg)


class KillingGrid(ScriptedGrid):
    """:class:`ScriptedGrid` whose nodes in ``killed`` answer messages of ``kind`` with Flower's
    error reply for a worker Ray killed for memory."""

    def __init__(self, killed: set[int], kind: str) -> None:
        super().__init__(train=lambda m: update_to_record(honest_update(m)), evaluate=honest_eval)
        self.killed, self.kind = killed, kind

    def send_and_receive(self, messages, *, timeout=None) -> list[Message]:
        messages = list(messages)
        dead = [
            m
            for m in messages
            if m.metadata.dst_node_id in self.killed and m.metadata.message_type.startswith(self.kind)
        ]
        for msg in dead:
            msg.metadata.__dict__["_message_id"] = str(uuid4())
        alive = [m for m in messages if m not in dead]
        return [flower_error(m) for m in dead] + (super().send_and_receive(alive) if alive else [])


def _start(tmp_path, grid: ScriptedGrid) -> None:
    module, datamodule, run, _ = load_run(
        str(ROOT / "configs/tiny.yaml"), "--federation.rounds=1 --federation.min_clients=2"
    )
    server = FederatedServer(run, module, datamodule.num_clients, tmp_path / "flower", timeout=600)
    server.start(grid, min_nodes=NUM_CLIENTS)


def test_ray_killing_every_worker_before_round_1_is_one_line(tmp_path):
    """Ray's memory monitor killed every ClientApp as it started (the real run's case): no node said
    which client it holds. Before: no cause at all, ``only 0 of 2 clients returned a valid update``."""
    with pytest.raises(RuntimeError) as raised:
        _start(tmp_path, KillingGrid(set(range(1, NUM_CLIENTS + 1)), "query"))
    assert str(raised.value) == (
        f"Ray killed the workers of {NUM_CLIENTS} of the {NUM_CLIENTS} SuperNodes because the machine ran low on"
        " memory (Ray's memory monitor, RAY_memory_usage_threshold), so no SuperNode could say which client it"
        " holds: " + WHAT_TO_CHANGE
    )


def test_ray_killing_the_workers_during_a_round_is_one_line(tmp_path):
    """The sampled clients' workers are killed while they train: the round's error leads with the cause."""
    with pytest.raises(RuntimeError) as raised:
        _start(tmp_path, KillingGrid({c + 1 for c in SAMPLED}, "train"))
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    clients = ", ".join(map(str, sorted(SAMPLED)))
    assert str(raised.value) == (
        f"Ray killed the workers of clients {clients} because the machine ran low on memory (Ray's memory"
        " monitor, RAY_memory_usage_threshold), so round 1 had fewer than federation.min_clients=2 valid"
        " updates: " + WHAT_TO_CHANGE
    )


@pytest.mark.slow  # Ray and two ClientApp workers: ~30 s of CPU, minutes of wall time on 2 busy cores
def test_ray_killing_the_workers_for_memory_ends_the_run_in_one_line(tmp_path):
    """The real thing: Flower's simulation engine (Ray) with a memory threshold of 1 % checked every
    50 ms, so Ray's memory monitor kills each ClientApp worker as it starts, whatever else runs here.
    The run ends (exit 1, as ``run_simulation`` raises the ServerApp's error) with the cause in its
    last line. Before: ``RuntimeError: round 1: only 0 of 2 clients returned a valid update, fewer
    than federation.min_clients=1 (failed: [0, 1], rejected: [])``, no cause."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "FLWR_TELEMETRY_ENABLED": "0",
        "RAY_memory_usage_threshold": "0.01",
        "RAY_memory_monitor_refresh_ms": "50",
    }
    overrides = "--data.num_clients=2 --federation.clients_per_round=2 --federation.rounds=1"
    cmd = [sys.executable, str(ROOT / "tests/helpers/flower_sim.py"), str(ROOT / "configs/tiny.yaml")]
    proc = subprocess.run(
        [*cmd, str(tmp_path / "sim"), "2", overrides], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.rstrip().splitlines()[-1] == (
        "RuntimeError: Ray killed the workers of 2 of the 2 SuperNodes because the machine ran low on memory"
        " (Ray's memory monitor, RAY_memory_usage_threshold), so no SuperNode could say which client it holds: "
        + WHAT_TO_CHANGE
    )
