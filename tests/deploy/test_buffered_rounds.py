"""FedBuff over Flower with real arrival order (deploy/train_rounds/buffered.py), on the in-process grid
with scripted reply delays on the grid's own clock."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict

from lightning_fed.deploy.apps import client_app, load_run
from lightning_fed.deploy.records import CONFIG, METRICS, REPLY, STATE, from_arrays, reply_binding, update_to_record
from lightning_fed.deploy.server import FederatedServer
from lightning_fed.deploy.train_rounds import buffered
from lightning_fed.strategies import ClientUpdate
from tests.helpers.flower_grid import InProcessGrid

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, rounds: int, num_clients: int = 3, arrivals: str = "real", concurrency: int = 3) -> str:
    """configs/tiny.yaml with FedBuff (buffer 2) and AsyncArrivals."""
    config = yaml.safe_load((ROOT / "configs/tiny.yaml").read_text())
    config["data"]["init_args"]["num_clients"] = num_clients
    config["federation"]["rounds"] = rounds
    config["federation"]["local_steps"] = 2
    config["federation"]["strategy"] = {
        "class_path": "lightning_fed.strategies.FedBuff",
        "init_args": {"buffer_size": 2},
    }
    hook = {"concurrency": concurrency, "local_steps": 2, "arrivals": arrivals, "seed": 0}
    config["federation"]["hooks"] = [{"class_path": "lightning_fed.heterogeneity.AsyncArrivals", "init_args": hook}]
    path = tmp_path / f"fedbuff_{arrivals}_{rounds}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def toy_app(msg: Message, context: Context) -> Message:
    """A client whose training is ``y = 0.5 * start + (client + 1)`` on every entry: a start-dependent
    update, so a wrong start model or staleness weight changes the result."""
    kind = msg.metadata.message_type
    if kind.endswith("partition"):
        pid = int(context.node_config["partition-id"])
        return Message(RecordDict({"partition": ConfigRecord({"partition-id": pid})}), reply_to=msg)
    cid = int(msg.content.config_records[CONFIG]["client-id"])
    if kind == "evaluate":
        metrics = MetricRecord({"num-examples": 1, "client-id": cid, "loss": 1.0})
        return Message(RecordDict({METRICS: metrics, REPLY: reply_binding(msg.content)}), reply_to=msg)
    start = from_arrays(msg.content.array_records[STATE])
    update = ClientUpdate(cid, 10, {k: 0.5 * v + (cid + 1) for k, v in start.items()})
    return Message(update_to_record(update, answers=msg.content), reply_to=msg)


class Capture:
    """A logger that keeps what it is given."""

    def __init__(self):
        self.logged = []

    def log_metrics(self, metrics, step):
        self.logged.append((step, dict(metrics)))

    def finalize(self, status):
        pass


def _server(config: str, out: Path, app=toy_app, timeout: float = 100.0, state: dict | None = None):
    module, datamodule, loop, _ = load_run(config)
    server = FederatedServer(loop, module, datamodule.num_clients, out, timeout=timeout, datamodule=datamodule)
    if state is not None:
        server.server.load_state_dict(state)
    capture = Capture()
    server.context.loggers.append(capture)
    return server, capture


def _run(server, grid, monkeypatch, nodes: int):
    monkeypatch.setattr(buffered, "monotonic", grid.clock)
    monkeypatch.setattr(buffered, "sleep", grid.sleep)
    server.start(grid, min_nodes=nodes)


def _delays(seconds: dict[int, float]):
    """Each node answers ``seconds[node]`` after a message is pushed to it."""
    return lambda msg: seconds[msg.metadata.dst_node_id]


def _step(x, terms):
    """One FedBuff step by hand, Algorithm 1 with K = 2, eta_g = 1: ``x + sum s(tau) (y - start) / K``."""
    return {k: x[k] + sum((0.5 * s[k] + (c + 1) - s[k]) / math.sqrt(1 + tau) for c, s, tau in terms) / 2 for k in x}


def test_replies_are_aggregated_in_arrival_order_and_a_slow_one_lands_later_with_its_staleness(tmp_path, monkeypatch):
    """Clients 0, 1, 2 answer 1, 2 and 9.5 s after dispatch. Steps 1-4 each take the replies of
    clients 0 and 1 (re-dispatched from the new model after each step); the server never waits
    for client 2, whose reply (from version 0) lands in step 5 with staleness 4, weighed 1/sqrt(5)."""
    server, capture = _server(_config(tmp_path, rounds=5), tmp_path / "run")
    x0 = {k: v.clone() for k, v in server.module.shared_parameters().items()}
    grid = InProcessGrid(toy_app, 3, {}, delay=_delays({1: 1.0, 2: 2.0, 3: 9.5}))
    _run(server, grid, monkeypatch, 3)

    history = server.server.report.history
    assert [r["clients"] for r in history] == [[0, 1]] * 4 + [[0, 2]]  # in arrival order
    assert [r["aggregated"] for r in history] == [[0, 1]] * 4 + [[0, 2]]
    staleness = [m["system/staleness"] for _, m in capture.logged if "system/staleness" in m]
    assert staleness == [0, 0, 0, 0, 2.0]  # (0 + 4) / 2 in step 5
    # Step 4 closed (its second reply pulled at t = 8, plus a poll interval per step) while client
    # 2 was still training; client 2's reply was pulled at the first poll after t = 9.5.
    times = [t for t, _ in grid.pulled]
    assert 8.0 <= times[7] < 8.5 and grid.pulled[9][1].metadata.src_node_id == 3
    assert 9.5 <= times[9] < 9.5 + 2 * buffered.POLL_SECONDS
    assert len(grid.waiting) == 1  # client 1's fifth task is abandoned at the end, not waited for
    assert grid.now < 10.0

    x = x0
    for _ in range(4):
        x = _step(x, [(0, x, 0), (1, x, 0)])
    want = _step(x, [(0, x, 0), (2, x0, 4)])  # client 2 trained from version 0
    got = server.server.global_state
    for k, v in want.items():
        torch.testing.assert_close(got[k], v, rtol=1e-6, atol=1e-6)
    assert server.server.strategy.version == 5
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [r["round"] for r in summary["rounds"]] == [1, 2, 3, 4, 5]
    assert summary["hooks"]["AsyncArrivals"]["dispatched"] == 3 + 2 * 4
    assert summary["hooks"]["AsyncArrivals"]["timed_out"] == 0
    nbytes = sum(v.numel() * v.element_size() for v in x0.values())
    assert [r["down_bytes"] for r in summary["rounds"]] == [2 * nbytes] * 5  # one download per update
    assert [r["up_bytes"] for r in summary["rounds"]] == [2 * nbytes] * 5


def _hand(x0, steps):
    """``steps`` FedBuff steps of clients 0 and 1, both from the current model."""
    x = x0
    for _ in range(steps):
        x = _step(x, [(0, x, 0), (1, x, 0)])
    return x


def test_a_client_that_never_answers_times_out_in_the_open_step_and_the_run_goes_on(tmp_path, monkeypatch):
    """Node 3 never answers a task (it answered the partition query); its task (dispatched at t = 0,
    time-out 4.5 s) fails in step 3, the step open at t = 4.5, before that step's two replies; it is
    dispatched again in step 4."""
    server, _ = _server(_config(tmp_path, rounds=4), tmp_path / "run", timeout=4.5)
    x0 = {k: v.clone() for k, v in server.module.shared_parameters().items()}
    grid = InProcessGrid(toy_app, 3, {}, delay=_delays({1: 1.0, 2: 2.0, 3: math.inf}))
    _run(server, grid, monkeypatch, 3)
    history = server.server.report.history
    assert [r["clients"] for r in history] == [[0, 1], [0, 1], [2, 0, 1], [0, 1]]
    assert [r["failed"] for r in history] == [[], [], [2], []]
    assert [r["aggregated"] for r in history] == [[0, 1]] * 4
    for k, v in _hand(x0, 4).items():
        torch.testing.assert_close(server.server.global_state[k], v, rtol=1e-6, atol=1e-6)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["failed_clients"] == 1 and summary["hooks"]["AsyncArrivals"]["timed_out"] == 1
    assert summary["hooks"]["AsyncArrivals"]["dispatched"] == 3 + 2 + 2 + 3


def _saved(state: dict) -> dict:
    """``state`` through a checkpoint file's round trip."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_a_resumed_buffered_run_goes_on_from_its_steps_without_counting_an_update_twice(tmp_path, monkeypatch):
    """Stopped after 2 steps (client 2 still training from version 0), then a new server loads the
    state and runs steps 3 and 4: the round numbers go on, every step aggregates exactly the two
    updates it took after the restart, the lost task's version is forgotten, and the result equals
    the uninterrupted run's (here client 2 lands in neither, so both are 4 hand steps)."""
    delays = _delays({1: 1.0, 2: 2.0, 3: 9.5})
    first, _ = _server(_config(tmp_path, rounds=2), tmp_path / "first")
    x0 = {k: v.clone() for k, v in first.module.shared_parameters().items()}
    _run(first, InProcessGrid(toy_app, 3, {}, delay=delays), monkeypatch, 3)
    state = _saved(first.server.state_dict())
    assert state["strategy"]["start_versions"] == {"2": 0}  # the task lost with the server

    resumed, _ = _server(_config(tmp_path, rounds=4), tmp_path / "resumed", state=state)
    grid = InProcessGrid(toy_app, 3, {}, delay=delays)
    _run(resumed, grid, monkeypatch, 3)
    history = resumed.server.report.history
    assert [r["round"] for r in history] == [1, 2, 3, 4]
    assert [r["aggregated"] for r in history] == [[0, 1]] * 4
    assert sorted(
        {int(m.content.config_records[CONFIG]["round"]) for m in grid.sent if m.content.config_records.get(CONFIG)}
    ) == [2, 3]
    fedbuff = resumed.server.strategy
    assert fedbuff.version == 4 and 0 not in fedbuff.models and fedbuff.buffered == 0

    straight, _ = _server(_config(tmp_path, rounds=4), tmp_path / "straight")
    _run(straight, InProcessGrid(toy_app, 3, {}, delay=delays), monkeypatch, 3)
    for k, v in _hand(x0, 4).items():
        torch.testing.assert_close(resumed.server.global_state[k], v, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(straight.server.global_state[k], v, rtol=1e-6, atol=1e-6)
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert [r["round"] for r in summary["rounds"]] == [1, 2, 3, 4]


def test_settings_under_which_the_buffer_cannot_fill_are_one_line_errors(tmp_path, monkeypatch):
    server, _ = _server(_config(tmp_path, rounds=1, concurrency=3), tmp_path / "run")
    grid = InProcessGrid(toy_app, 3, {})
    grid.dead.add(3)  # 2 nodes answer the partition query
    with pytest.raises(ValueError) as info:
        _run(server, grid, monkeypatch, 2)
    assert str(info.value) == (
        "federation.hooks: AsyncArrivals(arrivals=real): concurrency=3 exceeds the 2 clients with a node"
    )
    assert not [m for m in grid.sent if m.metadata.message_type == "train"] and not (tmp_path / "run").exists()


def test_real_clients_train_in_their_arrival_order(tmp_path, monkeypatch):
    """The real ClientApp (tiny DPO): 4 nodes, 3 in flight, steps of 2; node 4 is slow."""
    config = _config(tmp_path, rounds=3, num_clients=4)
    server, capture = _server(config, tmp_path / "run")
    x0 = {k: v.clone() for k, v in server.module.shared_parameters().items()}
    grid = InProcessGrid(client_app, 4, {"config": config, "overrides": ""}, delay=_delays({1: 1, 2: 3, 3: 2, 4: 7}))
    _run(server, grid, monkeypatch, 4)
    history = server.server.report.history
    assert [len(r["aggregated"]) for r in history] == [2, 2, 2] and server.server.strategy.version == 3
    assert all(4 - 1 not in r["clients"] for r in history)  # client 3 (node 4) never arrived in time
    moved = max((server.server.global_state[k] - v).abs().max().item() for k, v in x0.items())
    assert moved > 0 and all(torch.isfinite(v).all() for v in server.server.global_state.values())
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["engine"] == "flower" and "pref_acc" in summary["final"]["val"]
    assert [step for step, m in capture.logged if "system/wall_time" in m] == [1, 2, 3]


def test_real_arrivals_are_refused_in_process(tmp_path):
    """One process trains its clients one after another: no arrival order to take. Refused when the
    run is bound to its clients (``RoundHook.check_server``), before the run folder is written."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", _config(tmp_path, rounds=1)]
    cmd += [f"--trainer.default_root_dir={tmp_path / 'run'}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 2
    assert proc.stderr.splitlines(keepends=True)[-2:] == [
        "error: federation.hooks: AsyncArrivals: arrivals=real needs clients that train concurrently (a Flower"
        " deployment); in one process they train one after another: use arrivals=virtual\n",
        "(run with --debug or LIGHTNING_FED_DEBUG=1 for the traceback)\n",
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_flower_simulation_engine_runs_buffered_rounds(tmp_path):
    """Flower's own grid (the simulation engine's, Ray actors as SuperNodes, in a subprocess):
    push_messages/pull_messages, message ids and reply bindings as Flower sets them (~2 min)."""
    from tests.helpers.flower_sim import run_simulation_engine

    proc = run_simulation_engine(_config(tmp_path, rounds=3, num_clients=4), tmp_path / "sim", 4, [])
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert [len(r["aggregated"]) for r in summary["rounds"]] == [2, 2, 2]
    assert summary["hooks"]["AsyncArrivals"]["arrivals"] == "real" and summary["failed_clients"] == 0
    assert summary["hooks"]["AsyncArrivals"]["dispatched"] >= 3 + 2 * 2
    assert "pref_acc" in summary["final"]["val"]


def test_a_rejected_update_does_not_fill_the_buffer(tmp_path, monkeypatch):
    """Client 1 uploads NaN (rejected before aggregation, its bytes counted): the step waits for
    client 2's reply, so its two updates are clients 0 and 2, both from version 0."""

    def nan_for_client_1(msg, context):
        reply = toy_app(msg, context)
        if msg.metadata.message_type == "train" and context.node_config["partition-id"] == 1:
            start = from_arrays(msg.content.array_records[STATE])
            bad = ClientUpdate(1, 10, {k: torch.full_like(v, math.nan) for k, v in start.items()})
            reply = Message(update_to_record(bad, answers=msg.content), reply_to=msg)
        return reply

    server, _ = _server(_config(tmp_path, rounds=1), tmp_path / "run")
    x0 = {k: v.clone() for k, v in server.module.shared_parameters().items()}
    grid = InProcessGrid(nan_for_client_1, 3, {}, delay=_delays({1: 1.0, 2: 2.0, 3: 3.0}))
    with pytest.warns(UserWarning, match="update of client 1 rejected"):
        _run(server, grid, monkeypatch, 3)
    (record,) = server.server.report.history
    assert record["clients"] == [0, 1, 2] and list(record["rejected"]) == [1] and record["aggregated"] == [0, 2]
    for k, v in _step(x0, [(0, x0, 0), (2, x0, 0)]).items():
        torch.testing.assert_close(server.server.global_state[k], v, rtol=1e-6, atol=1e-6)
    nbytes = sum(v.numel() * v.element_size() for v in x0.values())
    assert record["up_bytes"] == record["down_bytes"] == 3 * nbytes
