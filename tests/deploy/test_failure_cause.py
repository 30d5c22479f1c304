"""A round that fails because its clients failed names the first client's cause in its one error
line (issue 41 item 11): Ray killing workers for memory used to end with ``only 0 of 2 clients
returned a valid update`` and nothing else."""

from types import SimpleNamespace

import pytest
import torch

from lightning_fed.deploy.failure_cause import OOM_ADVICE, failure_cause
from lightning_fed.federation import ServerRound
from lightning_fed.strategies import FedAvg

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
