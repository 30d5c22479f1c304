"""The train-round protocol (deploy/train_rounds/): one outer loop, a path per way of running a
round, and one place that refuses what cannot run.

A new path is a :class:`TrainRound` and an entry of ``HOOK_PATHS``: the test below adds one (each
client sent its message alone) without touching the outer loop, which still evaluates, records
and writes the run as for any path. Runs use the scripted honest clients of
``test_server_replies.py`` (no local training).
"""

from __future__ import annotations

import json

import pytest
from flwr.app import ConfigRecord

from lightning_fed.deploy.apps import load_run
from lightning_fed.deploy.records import to_arrays
from lightning_fed.deploy.server import FederatedServer
from lightning_fed.deploy.train_rounds import HOOK_PATHS, PlainRound, TrainRound, choice, choose_train_round
from lightning_fed.federation.hooks import RoundHook
from lightning_fed.heterogeneity import AsyncArrivals, SystemHeterogeneity
from lightning_fed.run import FederatedRun
from lightning_fed.strategies import FedBuff
from tests.deploy.test_server_replies import CONFIG_PATH, NUM_CLIENTS, ScriptedGrid, _train_replies, honest_eval


class OneAtATime(TrainRound):
    """A test path: each client's train message goes out alone (``send_and_receive`` per message)."""

    asked_by, instead = "OneAtATimeHook", "drop it"

    def run(self, round_idx: int) -> None:
        fed, server_round = self.fed, round_idx + 1
        messages = fed.configure_train(server_round, to_arrays(self.server.global_state), ConfigRecord(), self.grid)
        replies = [r for m in messages for r in self.grid.send_and_receive([m], timeout=self.timeout)]
        fed.aggregate_train(server_round, replies)


class OneAtATimeHook(RoundHook):
    def server_path(self) -> str | None:
        return "one_at_a_time"


class CountingGrid(ScriptedGrid):
    """Honest scripted clients; keeps the number of train messages of each ``send_and_receive``."""

    def __init__(self) -> None:
        super().__init__(_train_replies(lambda msg, honest: None), honest_eval)
        self.train_batches: list[int] = []

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        if any(m.metadata.message_type == "train" for m in messages):
            self.train_batches.append(len(messages))
        return super().send_and_receive(messages, timeout=timeout)


def _server(tmp_path, hooks: list[RoundHook], overrides: str = "") -> FederatedServer:
    module, datamodule, run, _ = load_run(CONFIG_PATH, f"--federation.min_clients=1 {overrides}")
    run.hooks.extend(hooks)
    return FederatedServer(run, module, datamodule.num_clients, tmp_path / "flower", timeout=5)


def test_a_new_path_runs_behind_the_same_outer_loop(tmp_path, monkeypatch):
    """Registered in ``HOOK_PATHS`` only: its rounds are recorded, evaluated per ``eval_every`` and
    written to ``summary.json`` by the outer loop, as the plain path's are."""
    monkeypatch.setitem(HOOK_PATHS, "one_at_a_time", OneAtATime)
    server = _server(tmp_path, [OneAtATimeHook()], "--federation.rounds=2 --federation.eval_every=1")
    grid = CountingGrid()
    result = server.start(grid, min_nodes=NUM_CLIENTS)
    assert isinstance(server.train_round, OneAtATime)
    assert grid.train_batches == [1, 1, 1, 1]  # 2 clients a round, each alone
    summary = json.loads((tmp_path / "flower" / "summary.json").read_text())
    assert [len(r["aggregated"]) for r in summary["rounds"]] == [2, 2] and "pref_acc" in summary["final"]["val"]
    assert sorted(result.train_metrics_clientapp) == [1, 2] and sorted(result.evaluate_metrics_clientapp) == [1, 2]
    assert dict(result.train_metrics_clientapp[2]) == {"aggregated": 2, "failed": 0, "rejected": 0}


def test_the_plain_path_is_the_default(tmp_path):
    server = _server(tmp_path, [RoundHook()])
    assert type(choose_train_round(server, grid=None, timeout=1.0)) is PlainRound


def test_two_hooks_asking_for_a_path_each_are_refused_in_one_line_before_anything_is_written(tmp_path):
    hooks = [AsyncArrivals(concurrency=2, arrivals="real"), SystemHeterogeneity(clock="wall", deadline=1.0)]
    run = FederatedRun(rounds=1, clients_per_round=2, save_adapter=False, strategy=FedBuff(buffer_size=2), hooks=hooks)
    server = FederatedServer(run, module=None, num_clients=3, output_dir=tmp_path / "run")
    with pytest.raises(ValueError) as info:
        server.start(grid=None)  # raised before the grid is used
    assert str(info.value) == (
        "federation.hooks: AsyncArrivals(arrivals=real) and SystemHeterogeneity.clock='wall' each ask for their own"
        " train round; a run has one"
    )
    assert not (tmp_path / "run").exists()


def test_a_path_no_train_round_implements_is_refused_in_one_line(tmp_path):
    server = _server(tmp_path, [OneAtATimeHook()])
    with pytest.raises(ValueError) as info:
        server.start(grid=None)
    assert str(info.value) == (
        "federation.hooks: OneAtATimeHook asks for the train round 'one_at_a_time';"
        f" the Flower server has {sorted(choice.HOOK_PATHS)}"
    )
    assert not (tmp_path / "flower").exists()


def test_a_server_given_a_saved_state_goes_on_with_its_next_round_on_every_path(tmp_path):
    """The outer loop starts at ``len(report.history)`` whatever the path (here the plain one): a
    server loaded with round 1's state runs round 2 only, and its record lists rounds 1 and 2."""
    first = _server(tmp_path / "first", [], "--federation.rounds=1")
    first.start(CountingGrid(), min_nodes=NUM_CLIENTS)
    resumed = _server(tmp_path / "resumed", [], "--federation.rounds=2")
    resumed.server.load_state_dict(first.server.state_dict())
    grid = CountingGrid()
    resumed.start(grid, min_nodes=NUM_CLIENTS)
    assert grid.train_batches == [2]  # round 2's two clients, once
    assert [r["round"] for r in resumed.server.report.history] == [1, 2]
