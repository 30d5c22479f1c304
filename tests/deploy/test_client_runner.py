"""ClientRunner, the Flower client's side of the hook contract: it answers pre-round queries and
runs prepare_client with the server's instructions before its turn is laid out, and its turn
uploads what the same client's turn uploads in-process."""

import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.deploy.client import ClientRunner
from lightning_fed.federation import RoundHook
from tests.helpers.runs import fit, preference_data, tiny_dpo


class KeepSome(RoundHook):
    """Each client keeps its first ``keep`` examples (the server's instruction); records uploads."""

    def __init__(self):
        self.updates, self.turns = {}, []

    def client_instruction(self, server, client_id, round_idx):
        return {"keep": 3 + client_id}

    def answer_query(self, module, data, client_id, round_idx, query):
        value = float(next(iter(module.shared_parameters().values())).detach().flatten()[0])
        return {"n": len(data.full_train), "value": value}

    def prepare_client(self, module, data, client_id, round_idx, instruction):
        data.select(list(range(instruction["keep"])))

    def on_client_end(self, turn, trainer, module, update):
        self.updates[turn.round_idx, update.client_id] = update
        self.turns.append((turn.client_id, turn.round_idx, turn.steps))


def _loop(hook):
    return FederatedLoop(rounds=2, clients_per_round=2, local_steps=None, local_epochs=1, hooks=[hook], seed=0)


def test_runner_answers_queries_and_trains_like_the_in_process_turn(tmp_path):
    in_process = KeepSome()
    loop = _loop(in_process)
    fit(tiny_dpo(), preference_data(), loop, str(tmp_path))
    clients = loop.server.report.history[0]["clients"]

    remote = KeepSome()
    module = tiny_dpo()
    start = {k: v.detach().clone() for k, v in module.shared_parameters().items()}  # round 1's global state
    loop = _loop(remote)
    runner = ClientRunner(module, preference_data(), loop.run)
    shifted = {k: v + 1.0 for k, v in start.items()}
    reply = runner.answer(0, clients[0], 0, {"with_global_state": True}, shifted)
    assert reply["value"] == float(next(iter(shifted.values())).flatten()[0])  # the sent state was loaded
    assert reply["n"] == len(runner.datamodule.client(clients[0]).full_train)

    cid = clients[-1]
    empty = {"personal": {}, "memory": {}}
    update, entry = runner.train(0, cid, start, {}, empty, {0: {"keep": 3 + cid}})
    assert update.num_examples == 3 + cid  # prepare_client ran before the layout: |D_k| is the selection
    assert remote.turns == [(cid, 0, 1 if 3 + cid <= 4 else 2)]  # one pass of batch 4 over 3 + cid rows
    reference = in_process.updates[0, cid]
    for k, v in reference.state.items():
        torch.testing.assert_close(update.state[k], v, rtol=1e-5, atol=1e-6)
    assert update.metrics["train_loss"] == reference.metrics["train_loss"]
