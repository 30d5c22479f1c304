"""The round-hook contract's order and traffic in-process: queries, replies, round start,
per-client instructions and prepare_client before the turn is laid out."""

import torch

from lightning_fed.federation import RoundHook
from lightning_fed.state import state_nbytes
from tests.callbacks.test_federated_loop import run


class Contract(RoundHook):
    """Asks every client (with the global state) in round 1, drops the last sampled client, and
    has each trained client keep its first 3 examples (one batch of 4 under local_epochs=1)."""

    def __init__(self):
        self.events, self.replies, self.trained = [], {}, []

    def client_queries(self, server, trainer, module, round_idx, clients):
        self.events.append(("queries", round_idx))
        if round_idx:
            return {}
        self.global_value = float(next(iter(server.global_state.values())).flatten()[0])
        return {c: {"with_global_state": True, "probe": torch.ones(2)} for c in range(server.num_clients)}

    def answer_query(self, module, data, client_id, round_idx, query):
        value = float(next(iter(module.shared_parameters().values())).detach().flatten()[0])
        self.events.append(("answer", client_id))
        return {"n": len(data.full_train), "value": value, "t": torch.zeros(3, dtype=torch.float64)}

    def on_replies(self, server, context, module, replies):
        self.events.append(("replies", replies.round_idx))
        self.replies = replies.answers
        self.dropped = replies.clients.pop()

    def on_round_start(self, server, trainer, module, round_idx, clients):
        self.events.append(("round_start", tuple(clients)))

    def client_instruction(self, server, client_id, round_idx):
        return {"keep": 3}

    def prepare_client(self, module, data, client_id, round_idx, instruction):
        self.events.append(("prepare", client_id, instruction.get("keep")))
        if "keep" in instruction:
            data.select(list(range(instruction["keep"])))

    def on_client_start(self, turn, trainer, module, client_id):
        self.events.append(("client_start", client_id))
        self.trained.append((turn.round_idx, client_id))


def test_hook_contract_order_instructions_and_bytes(tmp_path):
    hook = Contract()
    loop = run(tmp_path, rounds=2, hooks=[hook], clients_per_round=3, local_steps=None, local_epochs=1)
    first = loop.server.report.history[0]
    kept = [e[1] for e in hook.events if e[0] == "round_start"][0]
    assert len(kept) == 2 and hook.dropped not in kept and first["clients"] == list(kept)
    # Order of round 1: queries, every client answers, replies, round start, then per client
    # its prepare_client (the layout is planned before any turn starts), then the turns.
    n = len(hook.events)
    assert hook.events[:7] == [
        ("queries", 0),
        ("answer", 0),
        ("answer", 1),
        ("answer", 2),
        ("answer", 3),
        ("replies", 0),
        ("round_start", kept),
    ]
    assert hook.events[7:11] == [("prepare", kept[0], 3), ("prepare", kept[1], 3)] + [
        ("client_start", kept[0]),
        ("client_start", kept[1]),
    ], hook.events[7:n]
    assert sorted(hook.replies) == [0, 1, 2, 3]
    assert all(r["value"] == hook.global_value for r in hook.replies.values())  # answered from the global state
    assert [t.num_batches for t in loop.plans] == [1] * len(loop.plans)  # 3 examples kept, batch 4
    # Bytes of round 1: each trained client gets and returns the state (G bytes, FedAvg has no
    # extras); each of the 4 asked clients gets the state plus 2 float32 (8 bytes) and returns
    # 3 float64 (24 bytes). Round 2 asks nobody.
    g = state_nbytes(loop.server.global_state)
    assert first["down_bytes"] == 2 * g + 4 * (g + 8)
    assert first["up_bytes"] == 2 * g + 4 * 24
    assert loop.server.report.history[1]["down_bytes"] == loop.server.report.history[1]["up_bytes"] == 3 * g
