"""The Flower server against a misbehaving client, without processes or local training.

A :class:`ScriptedGrid` plays four SuperNodes (node ``k + 1`` holds client ``k``) whose replies
are written by the test: honest ones (the state sent plus 0.01, 10 examples) and forged ones.
Each case runs one real round of :class:`FederatedServer` (sampling, checks, FedAvg, evaluation,
``summary.json``) and asserts the forged reply was rejected and counted, the honest ones were
aggregated, and the ServerApp did not crash.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from uuid import uuid4

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict

from lightning_fed.deploy.apps import load_run
from lightning_fed.deploy.records import (
    CONFIG,
    METRICS,
    REPLY,
    STATE,
    ReplyLimits,
    reply_binding,
    to_arrays,
    update_to_record,
)
from lightning_fed.deploy.server import FederatedServer
from lightning_fed.federation.sampling import sample_clients
from lightning_fed.strategies.base import ClientUpdate

CONFIG_PATH = "configs/tiny.yaml"
NUM_CLIENTS = 4
SAMPLED = sample_clients(NUM_CLIENTS, 2, 0, 0)  # the two clients of round 1 (seed 0)


def honest_update(msg: Message) -> ClientUpdate:
    """What client ``client-id`` of ``msg`` uploads: the state it was sent, moved by 0.01."""
    cid = int(msg.content.config_records[CONFIG]["client-id"])
    state = {k: v + 0.01 for k, v in msg.content.array_records[STATE].to_torch_state_dict().items()}
    return ClientUpdate(cid, 10, state, {}, {"loss": 0.5})


def honest_eval(msg: Message) -> RecordDict:
    cid = int(msg.content.config_records[CONFIG]["client-id"])
    return RecordDict({METRICS: MetricRecord({"num-examples": 6, "client-id": cid, "pref_acc": 0.5 + 0.1 * cid})})


class ScriptedGrid:
    """Nodes ``1..n`` (node ``k`` holds client ``k - 1``) answering with ``train(msg)`` / ``evaluate(msg)``."""

    def __init__(
        self, train: Callable[[Message], RecordDict], evaluate: Callable[[Message], RecordDict], partition=None
    ) -> None:
        from flwr.supercore.task_identity import TaskIdentity

        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
        self.train, self.evaluate = train, evaluate
        self.partition = partition or (lambda node: RecordDict({"partition": ConfigRecord({"partition-id": node - 1})}))
        self.replies: dict[int, RecordDict] = {}

    def get_node_ids(self) -> list[int]:
        return list(range(1, NUM_CLIENTS + 1))

    def send_and_receive(self, messages, *, timeout=None) -> list[Message]:
        out = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid4())  # what Flower's grid does when it pushes
            kind = msg.metadata.message_type
            answer = self.partition if kind.startswith("query") else self.train if kind == "train" else self.evaluate
            content = answer(msg.metadata.dst_node_id) if kind.startswith("query") else answer(msg)
            if isinstance(content, Message):  # a whole earlier reply, replayed as it was
                out.append(content)
                continue
            if not kind.startswith("query") and REPLY not in content.config_records:
                content[REPLY] = reply_binding(msg.content)  # an honest client echoes the message's binding
            out.append(Message(content, reply_to=msg))
        return out


def _run(
    tmp_path, grid: ScriptedGrid, limits: ReplyLimits | None = None, rounds: int = 1
) -> tuple[FederatedServer, dict]:
    module, datamodule, loop, _ = load_run(CONFIG_PATH, f"--federation.rounds={rounds} --federation.min_clients=1")
    server = FederatedServer(loop, module, datamodule.num_clients, tmp_path / "flower", timeout=5, limits=limits)
    server.start(grid, min_nodes=NUM_CLIENTS)
    return server, json.loads((tmp_path / "flower" / "summary.json").read_text())


def _train_replies(forge: Callable[[Message, ClientUpdate], RecordDict | None]) -> Callable[[Message], RecordDict]:
    """Honest train replies, except where ``forge(msg, honest)`` returns a forged record."""

    def train(msg: Message) -> RecordDict:
        honest = honest_update(msg)
        return forge(msg, honest) or update_to_record(honest)

    return train


def test_impostor_claiming_another_sampled_client_is_rejected_and_the_real_one_counts(tmp_path):
    impostor, real = SAMPLED
    honest_state = {}

    def forge(msg, honest):
        if honest.client_id == real:
            honest_state.update(honest.state)
        if honest.client_id == impostor:  # answers first, claiming to be the other sampled client
            fake = {k: torch.full_like(v, 5.0) for k, v in honest.state.items()}
            return update_to_record(ClientUpdate(real, 10, fake, {}, {}))
        return None

    server, summary = _run(tmp_path, ScriptedGrid(_train_replies(forge), honest_eval))
    (rnd,) = summary["rounds"]
    assert rnd["aggregated"] == [real]
    assert list(rnd["rejected"]) == [str(impostor)] and "claims client-id" in rnd["rejected"][str(impostor)]
    assert summary["rejected_updates"] == 1
    for k, v in honest_state.items():  # FedAvg of the real client alone: its state, not the impostor's 5.0
        torch.testing.assert_close(server.server.global_state[k], v)


def _extras_record(honest: ClientUpdate, extras: dict[str, torch.Tensor]) -> RecordDict:
    record = update_to_record(honest)
    record["extras"] = to_arrays(extras)
    return record


def _int_state(honest: ClientUpdate) -> RecordDict:
    record = update_to_record(honest)
    name = next(iter(honest.state))
    arrays = dict(record.array_records[STATE].items())
    arrays[name] = Array(np.zeros(tuple(honest.state[name].shape), dtype=np.int64))
    record[STATE] = ArrayRecord(arrays)
    return record


def _not_numpy(honest: ClientUpdate) -> RecordDict:
    record = update_to_record(honest)
    arrays = dict(record.array_records[STATE].items())
    name = next(iter(arrays))
    arrays[name] = Array(dtype="float32", shape=(2,), stype="pickle", data=b"\x80\x04K\x01.")
    record[STATE] = ArrayRecord(arrays)
    return record


def _with_metrics(honest: ClientUpdate, **metrics) -> RecordDict:
    record = update_to_record(honest)
    record[METRICS] = MetricRecord({**dict(record.metric_records[METRICS]), **metrics})
    return record


FORGED = {
    "num-examples 10**12": (
        lambda h: _with_metrics(h, **{"num-examples": 10**12}),
        "'num-examples' must be an integer in [1, 1000000]",
    ),
    "20,000 metric keys": (
        lambda h: _with_metrics(h, **{f"m{i}": 0.0 for i in range(20_000)}),
        "20003 metric keys, more than max-metric-keys=64",
    ),
    "list-valued metric": (lambda h: _with_metrics(h, loss=[1.0, 2.0]), "'loss' must be a number, got list"),
    "non-finite metric": (lambda h: _with_metrics(h, loss=float("nan")), "'loss' must be finite"),
    "int64 state array": (_int_state, "must be floating-point, got torch.int64"),
    "array not NumPy-serialised": (_not_numpy, "cannot be decoded"),
    "extras FedAvg never asked for": (
        lambda h: _extras_record(h, {"control/x": torch.zeros(3)}),
        "extras do not match the strategy's",
    ),
    "int extras": (
        lambda h: _extras_record(h, {"control/x": torch.zeros(3, dtype=torch.int32)}),
        "extras/'control/x' must be floating-point",
    ),
}


@pytest.mark.parametrize("case", list(FORGED))
def test_malformed_train_reply_is_rejected_not_a_crash(tmp_path, case):
    forge_fn, reason = FORGED[case]
    victim, other = SAMPLED
    forge = lambda msg, honest: forge_fn(honest) if honest.client_id == victim else None  # noqa: E731
    _, summary = _run(tmp_path, ScriptedGrid(_train_replies(forge), honest_eval))
    (rnd,) = summary["rounds"]
    assert rnd["aggregated"] == [other] and summary["rejected_updates"] == 1
    assert reason in rnd["rejected"][str(victim)] and "\n" not in rnd["rejected"][str(victim)]


def test_server_limits_are_configurable(tmp_path):
    victim, other = SAMPLED
    forge = lambda msg, honest: _with_metrics(honest, **{"num-examples": 500}) if honest.client_id == victim else None  # noqa: E731
    _, summary = _run(tmp_path, ScriptedGrid(_train_replies(forge), honest_eval), ReplyLimits(max_examples=100))
    assert summary["rounds"][0]["aggregated"] == [other]
    with pytest.raises(ValueError, match="max-examples must be an integer >= 1, got 0"):
        ReplyLimits(max_examples=0)


def test_bad_evaluate_replies_are_rejected_and_the_rest_averaged(tmp_path):
    """A list-valued metric, an impostor and 10**12 examples: counted, warned, left out of the mean."""

    def evaluate(msg):
        cid = int(msg.content.config_records[CONFIG]["client-id"])
        bad = {
            0: {"num-examples": 6, "client-id": 0, "pref_acc": [1.0, 0.0]},
            1: {"num-examples": 6, "client-id": 2, "pref_acc": 1.0},
            2: {"num-examples": 10**12, "client-id": 2, "pref_acc": 1.0},
        }
        return RecordDict({METRICS: MetricRecord(bad[cid])}) if cid in bad else honest_eval(msg)

    with pytest.warns(
        UserWarning, match="evaluation of client 0 rejected: reply metric 'pref_acc' must be a number, got list"
    ):
        server, summary = _run(tmp_path, ScriptedGrid(_train_replies(lambda m, h: None), evaluate))
    assert summary["rejected_evaluations"] == 3 and server.rejected_evaluations == 3
    assert summary["rounds"][0]["aggregated"] == sorted(SAMPLED)
    assert summary["final"]["val"]["pref_acc"] == pytest.approx(0.5 + 0.1 * 3)  # client 3 alone


def test_malformed_partition_answers_leave_the_node_out(tmp_path):
    def partition(node):
        claims = {1: [0, 1], 2: NUM_CLIENTS + 7}
        value = claims.get(node, node - 1)
        return RecordDict({"partition": ConfigRecord({"partition-id": value})})

    grid = ScriptedGrid(_train_replies(lambda m, h: None), honest_eval, partition=partition)
    server, summary = _run(tmp_path, grid)
    assert server.nodes == {2: 3, 3: 4}
    (rnd,) = summary["rounds"]
    assert sorted(rnd["failed"]) == sorted(c for c in SAMPLED if c in (0, 1))


@pytest.mark.parametrize("replay", ["content", "message"])
def test_a_reply_replayed_from_an_earlier_round_is_refused(tmp_path, replay):
    """Client 3 trains in rounds 1 and 2 (seed 0); its round-1 reply is replayed in round 2, as
    the same content in a reply to the round-2 message (the echoed round and nonce differ) or as
    the whole round-1 message (it answers another message). Refused: not aggregated, failed."""
    assert 3 in sample_clients(NUM_CLIENTS, 2, 0, 0) and sample_clients(NUM_CLIENTS, 2, 0, 1) == [0, 3]
    recorded: dict[str, object] = {}
    honest_zero = {}

    def train(msg):
        cfg = msg.content.config_records[CONFIG]
        round_idx, cid = int(cfg["round"]), int(cfg["client-id"])
        if (round_idx, cid) == (1, 3):
            return recorded[replay]
        record = update_to_record(honest_update(msg), answers=msg.content)
        if (round_idx, cid) == (0, 3):
            recorded["content"], recorded["message"] = record, Message(record, reply_to=msg)
        if (round_idx, cid) == (1, 0):
            honest_zero.update(honest_update(msg).state)
        return record

    expected = "it answers round 1" if replay == "content" else "it answers message"
    with pytest.warns(UserWarning, match=f"round 2: reply for client 3 refused: .*{expected}"):
        server, summary = _run(tmp_path, ScriptedGrid(train, honest_eval), rounds=2)
    second = summary["rounds"][1]
    assert second["aggregated"] == [0] and second["failed"] == [3] and summary["failed_clients"] == 1
    for k, v in honest_zero.items():  # round 2 is client 0's update alone
        torch.testing.assert_close(server.server.global_state[k], v)


def test_a_reply_without_its_binding_is_refused(tmp_path):
    """A reply that echoes no round and nonce (an old or foreign client) does not count."""
    victim, other = SAMPLED

    def train(msg):
        record = update_to_record(honest_update(msg))  # no `answers`: no binding
        if int(msg.content.config_records[CONFIG]["client-id"]) == victim:
            return Message(record, reply_to=msg)  # as it is (the grid would bind an honest record)
        return record

    with pytest.warns(UserWarning, match=f"reply for client {victim} refused: the reply carries no 'reply' record"):
        _, summary = _run(tmp_path, ScriptedGrid(train, honest_eval))
    assert summary["rounds"][0]["aggregated"] == [other] and summary["rounds"][0]["failed"] == [victim]
