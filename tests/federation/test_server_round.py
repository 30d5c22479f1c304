"""ServerRound on its own: the hook order of a round, admission, aggregation by hand, the
round's record and bytes; the one clients_per_round check; Flower refuses local-only hooks."""

from types import SimpleNamespace

import pytest
import torch

from lightning_fed.federation import RoundHook, ServerRound
from lightning_fed.federation.hooks import Capability
from lightning_fed.strategies import FedAvg
from lightning_fed.strategies.base import ClientUpdate


class Order(RoundHook):
    def __init__(self, log):
        self.log = log

    def client_queries(self, server, trainer, module, round_idx, clients):
        self.log.append(("queries", list(clients)))
        return {0: {"x": torch.zeros(4)}}  # 16 bytes

    def on_replies(self, server, context, module, replies):
        self.log.append(("replies", dict(replies.answers)))
        replies.clients.remove(max(replies.clients))

    def on_round_start(self, server, trainer, module, round_idx, clients):
        self.log.append(("round_start", list(clients)))

    def client_instruction(self, server, client_id, round_idx):
        return {"k": client_id} if client_id else {}

    def after_aggregate(self, server, trainer, module, round_idx):
        self.log.append(("after_aggregate", server.global_state["w"].tolist()))


class Module:
    def load_state(self, state):
        self.loaded = {k: v.clone() for k, v in state.items()}


def test_a_round_through_the_server_side():
    log = []
    server = ServerRound(FedAvg(), [Order(log)], rounds=2, clients_per_round=3, min_clients=1, seed=0)
    server.bind(5)
    server.global_state = {"w": torch.tensor([0.0, 0.0])}
    clients = server.sample(0)
    assert clients == sorted(clients) and len(clients) == 3

    def ask(hook_index, queries):
        log.append(("ask", hook_index, sorted(queries)))
        return {c: {"ok": True} for c in queries}

    sampled = list(clients)
    server.prepare(None, None, 0, clients, ask)
    kept = sampled[:2]
    assert clients == kept  # on_replies dropped the last client from the round
    assert log == [
        ("queries", sampled),
        ("ask", 0, [0]),
        ("replies", {0: {"ok": True}}),
        ("round_start", kept),
    ]
    assert server.client_instructions(1, 0) == {0: {"k": 1}} and server.client_instructions(0, 0) == {}
    server.open(0, kept)
    a, b = kept
    for c in kept:
        start, downlink = server.send(c)
        assert start["w"].tolist() == [0.0, 0.0] and downlink == {}
    server.receive(ClientUpdate(a, 1, {"w": torch.tensor([3.0, 0.0])}))
    server.receive(ClientUpdate(b, 3, {"w": torch.tensor([float("nan"), 0.0])}))  # rejected: non-finite
    trainer = SimpleNamespace(is_global_zero=True, loggers=[])
    module = Module()
    server.close(trainer, module)
    assert server.global_state["w"].tolist() == [3.0, 0.0] and module.loaded["w"].tolist() == [3.0, 0.0]
    assert log[-1] == ("after_aggregate", [3.0, 0.0])
    record = server.report.history[0]
    assert record["aggregated"] == [a] and list(record["rejected"]) == [b] and record["failed"] == []
    assert record["down_bytes"] == 2 * 8 and record["up_bytes"] == 2 * 8  # 2 float32 each way per client
    assert server.fault_counts() == {"failed_clients": 0, "rejected_updates": 1, "clipped_updates": 0}
    assert server.sent(a) is None  # released after the round


def test_fedavg_weights_by_examples_and_min_clients_fails_the_round():
    server = ServerRound(FedAvg(), [], rounds=1, clients_per_round=2, min_clients=2, seed=0)
    server.bind(2)
    server.global_state = {"w": torch.zeros(1)}
    server.open(0, [0, 1])
    server.send(0), server.send(1)
    server.receive(ClientUpdate(0, 1, {"w": torch.tensor([4.0])}))
    server.receive(ClientUpdate(1, 3, {"w": torch.tensor([8.0])}))
    server.close(SimpleNamespace(is_global_zero=True, loggers=[]), Module())
    assert server.global_state["w"].item() == pytest.approx((1 * 4.0 + 3 * 8.0) / 4)  # 7.0
    server.open(1, [0, 1])
    server.send(0), server.send(1)
    server.fail(1)
    server.receive(ClientUpdate(0, 1, {"w": torch.tensor([1.0])}))
    with pytest.raises(RuntimeError, match=r"only 1 of 2 clients .* federation.min_clients=2 \(failed: \[1\]"):
        server.close(SimpleNamespace(is_global_zero=True, loggers=[]), Module())


def test_clients_per_round_is_checked_against_the_federation():
    server = ServerRound(FedAvg(), [], rounds=1, clients_per_round=4, min_clients=1)
    with pytest.raises(ValueError, match=r"^federation.clients_per_round=4 exceeds data.num_clients=3$"):
        server.bind(3)


def test_flower_refuses_a_hook_that_reads_client_data_on_the_server(tmp_path):
    from lightning_fed.deploy.server import FederatedServer
    from lightning_fed.run import FederatedRun

    class Local(RoundHook):
        capabilities = frozenset({Capability.READS_CLIENT_DATA})

        def on_client_data(self, server, context, module, round_idx, clients, data):
            pass

    run = FederatedRun(rounds=1, clients_per_round=1, save_adapter=False, hooks=[RoundHook(), Local()])
    server = FederatedServer(run, module=None, num_clients=2, output_dir=tmp_path)
    with pytest.raises(ValueError, match=r"^federation.hooks: Local cannot run under Flower: it reads client data"):
        server.start(grid=None)  # raised before the grid is used
