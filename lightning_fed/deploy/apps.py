"""The Flower ``ClientApp`` and ``ServerApp`` of any lightning-fed method.

Both read the same YAML config as ``lightning-fed fit`` (run-config key ``config``, plus
optional ``overrides``: CLI arguments such as ``"--federation.rounds=2"``), so a method that
runs in-process runs under Flower unchanged. Run-config keys:

- ``config``: a shipped config's name (``tiny``, ``feddpo``: ``lightning-fed configs``) or the
  path of the run's YAML config (readable on every machine).
- ``overrides``: extra ``lightning-fed`` arguments, space separated.
- ``output-dir``: where the server writes ``summary.json``, TensorBoard events and the
  adapter (default: the config's ``trainer.default_root_dir``).
- ``timeout``: seconds the server waits for a round's replies (default 3600).
- ``min-nodes``: SuperNodes to wait for before round 1 (default: clients per round).
- ``max-examples``, ``max-metric-keys``: what a client's reply may claim (see
  :class:`~lightning_fed.deploy.records.ReplyLimits`); a reply beyond them is rejected.

``client_app``/``server_app`` are what ``flwr run flower_app`` loads (the app folder written by
``lightning-fed configs --copy flower_app``; in a clone also ``lightning_fed/deploy/flower_app``).
For Flower's simulation engine from Python, bind the config into the apps::

    run_simulation(make_server_app(config="tiny"), make_client_app(config="tiny"), num_supernodes=4)

A SuperNode says which client it is with its node config ``partition-id`` (Flower's
simulation engine sets it for each virtual node). Round hooks that need client work before a
round (FedHDS selection, FedBiscuit grouping) send ``query.hook`` messages, answered here by
``ClientRunner.answer``; their per-client instructions ride in the train message. What a node
keeps between rounds (personal parameters, algorithm memory such as SCAFFOLD's ``c_i``) lives
in its ``context.state``. With a :class:`~lightning_fed.deploy.secure_aggregation.SecureAggregation`
strategy the train round runs Flower's SecAgg+ (``secure_aggregation_flower.py``): the train
handler sits behind ``secaggplus_mod`` and answers with its masked contribution.
"""

from __future__ import annotations

import os
import time
from functools import lru_cache
from logging import INFO
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log as flwr_log

from lightning_fed import run_factory
from lightning_fed.deploy.client import ClientRunner
from lightning_fed.deploy.records import (
    CONFIG,
    DOWNLINK,
    METRICS,
    PAYLOAD,
    REPLY,
    STATE,
    ReplyLimits,
    from_arrays,
    payload_records,
    record_to_instructions,
    record_to_payload,
    reply_binding,
    update_to_record,
)
from lightning_fed.deploy.secure_aggregation_flower import contribution_reply, is_secure, secure_train_mod
from lightning_fed.deploy.server import FederatedServer
from lightning_fed.errors import UserError
from lightning_fed.privacy.dp_sgd import ExampleLevelDP
from lightning_fed.run import FederatedRun
from lightning_fed.run_parser import parse_run
from lightning_fed.shipped_configs import resolve_config


def load_run(config: str, overrides: str = "") -> tuple[Any, Any, FederatedRun, dict[str, Any]]:
    """``(module, datamodule, run, trainer_config)`` of a ``lightning-fed`` config: the objects of
    its sections (:func:`~lightning_fed.run_parser.parse_run`), no Trainer and no LightningCLI."""
    parsed = parse_run(config, overrides)
    return parsed.module, parsed.datamodule, parsed.run, parsed.trainer


@lru_cache(maxsize=1)
def _runner(config: str, overrides: str, run_id: int = 0) -> ClientRunner:
    # One per process and run: the backbone is loaded once and serves every later round
    # handled by the same process. That is every round under Flower's simulation engine (a Ray
    # actor runs a node's ClientApp for the whole run), in-process grids, and a deployment whose
    # SuperNodes run `--isolation process` next to a `lightning-fed flower clientapp` process
    # (deploy/clientapp_process.py). flwr's default `--isolation subprocess` starts a fresh
    # `flwr-clientapp` per task, so there each round loads again. Keyed by run (a new run starts
    # from a fresh module and data) and holding one: a previous run's backbone is freed.
    started = time.monotonic()
    module, datamodule, run, trainer_config = load_run(config, overrides)
    runner = ClientRunner(module, datamodule, run, trainer_kwargs=trainer_config)
    if isinstance(module, ExampleLevelDP):  # DP-SGD's plan (delta, rounds, steps): each client calibrates its own z
        run_factory.run_privacy(run).plan_example_budget(
            module, datamodule.num_clients, datamodule.batch_size, run.rounds
        )
    flwr_log(
        INFO,
        "[lightning-fed] client runner built (backbone loaded) for run %s in %.2fs, pid %d",
        run_id,
        time.monotonic() - started,
        os.getpid(),
    )
    return runner


def _context_runner(context: Context, cfg: dict[str, Any]) -> ClientRunner:
    return _runner(cfg["config"], cfg["overrides"], int(context.run_id))


def _settings(context: Context, defaults: dict[str, Any]) -> dict[str, Any]:
    """The run config: Flower's (``flwr run`` / pyproject) over the app's own defaults."""
    cfg = {**defaults, **{k: v for k, v in context.run_config.items() if v not in ("", None)}}
    if not cfg.get("config"):
        raise ValueError("run config: missing 'config' (a shipped config's name, or the YAML config's path)")
    try:
        cfg["config"] = resolve_config(str(cfg["config"]))  # a shipped name (`tiny`) is its file's path
    except UserError:  # neither a file nor a shipped name: said below, for the run config
        pass
    if not Path(cfg["config"]).is_file():
        raise FileNotFoundError(
            f"run config: config={cfg['config']!r} is neither a shipped config (lightning-fed configs) "
            f"nor a file on this machine (cwd {os.getcwd()})"
        )
    cfg["config"], cfg["overrides"] = str(cfg["config"]), str(cfg.get("overrides", ""))
    return cfg


def _entry(context: Context) -> dict[str, Any]:
    state = context.state
    return {k: from_arrays(state.array_records[k]) if k in state.array_records else {} for k in ("personal", "memory")}


def _own_client(context: Context, client_id: int) -> int:
    """``client_id`` if this node holds it (its ``partition-id``), else ``ValueError``."""
    if client_id != int(context.node_config.get("partition-id", client_id)):
        raise ValueError(
            f"this node holds partition-id={context.node_config['partition-id']}, asked about client {client_id}"
        )
    return client_id


# ------------------------------------------------------------------------------ ClientApp
def make_client_app(**defaults: Any) -> ClientApp:
    """A ``ClientApp`` running this machine's client; ``defaults`` are run-config values
    (``config=...``) used where Flower's run config has none (e.g. ``run_simulation``)."""
    app = ClientApp()

    @app.query("partition")
    def partition(msg: Message, context: Context) -> Message:
        """Tell the server which client (data partition) this node holds."""
        pid = context.node_config.get("partition-id")
        if pid is None:
            raise ValueError(
                "node config: missing 'partition-id' (start the SuperNode with --node-config 'partition-id=<k>')"
            )
        return Message(RecordDict({"partition": ConfigRecord({"partition-id": int(pid)})}), reply_to=msg)

    @app.query("hook")
    def hook_query(msg: Message, context: Context) -> Message:
        """A round hook's pre-round query (``deploy/queries.py``), answered from this node's client."""
        cfg = _settings(context, defaults)
        runner = _context_runner(context, cfg)
        content = msg.content
        meta = content.config_records[CONFIG]
        client_id = _own_client(context, int(meta["client-id"]))
        state = from_arrays(content.array_records[STATE]) if STATE in content.array_records else None
        answer = runner.answer(int(meta["hook"]), client_id, int(meta["round"]), record_to_payload(content), state)
        records = {**payload_records(answer, PAYLOAD), REPLY: reply_binding(content)}
        return Message(RecordDict(records), reply_to=msg)

    @app.train(mods=[secure_train_mod])
    def train(msg: Message, context: Context) -> Message:
        """Local training of this node's client from the state the server sent (under SecAgg+,
        its contribution goes to Flower's ``secaggplus_mod``, which masks it)."""
        received = time.monotonic()  # a wall-clock time budget runs from here
        cfg = _settings(context, defaults)
        runner = _context_runner(context, cfg)
        content = msg.content
        instruction = content.config_records[CONFIG]
        client_id = _own_client(context, int(instruction["client-id"]))
        update, entry = runner.train(
            int(instruction["round"]),
            client_id,
            from_arrays(content.array_records[STATE]),
            from_arrays(content.array_records.get(DOWNLINK)),
            _entry(context),
            record_to_instructions(content),
            received,
        )
        for key in ("personal", "memory"):
            context.state[key] = ArrayRecord(dict(entry[key])) if entry[key] else ArrayRecord()
        if is_secure(msg):
            received = from_arrays(content.array_records[STATE])
            downlink = from_arrays(content.array_records.get(DOWNLINK))
            reply = contribution_reply(
                runner.run.strategy, received, update, int(instruction["round"]), instruction["nonce"], downlink
            )
            return Message(reply, reply_to=msg)
        return Message(update_to_record(update, answers=content), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        """This node's client evaluates the global state (with its personal state) on its val split."""
        cfg = _settings(context, defaults)
        runner = _context_runner(context, cfg)
        content = msg.content
        client_id = int(content.config_records[CONFIG]["client-id"])
        state, instructions = from_arrays(content.array_records[STATE]), record_to_instructions(content)
        means, count = runner.evaluate(client_id, state, _entry(context), instructions)
        metrics = MetricRecord(
            {"num-examples": count, "client-id": client_id, **{k: float(v) for k, v in means.items()}}
        )
        return Message(RecordDict({METRICS: metrics, REPLY: reply_binding(content)}), reply_to=msg)

    return app


# ------------------------------------------------------------------------------ ServerApp
def make_server_app(**defaults: Any) -> ServerApp:
    """A ``ServerApp`` running the config's rounds; ``defaults`` as in :func:`make_client_app`."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        cfg = _settings(context, defaults)
        module, datamodule, run, trainer_config = load_run(cfg["config"], cfg["overrides"])
        # The server never loads the clients' data: it knows their number, sizes come with updates.
        out = str(cfg.get("output-dir") or trainer_config.get("default_root_dir") or "runs/flower")
        limits = ReplyLimits(
            **{
                k: int(cfg[key])
                for k, key in (("max_examples", "max-examples"), ("max_metric_keys", "max-metric-keys"))
                if key in cfg
            }
        )
        server = FederatedServer(
            run,
            module,
            datamodule.num_clients,
            out,
            timeout=float(cfg.get("timeout", 3600)),
            limits=limits,
            datamodule=datamodule,  # not set up: what hooks read on the server (e.g. FedHDS anchors' encoding)
        )
        min_nodes = int(cfg.get("min-nodes", 0)) or run.clients_per_round
        server.start(grid, min_nodes=min_nodes)

    return app


# What `flwr run flower_app` loads (its pyproject's components; `lightning-fed configs --copy flower_app`).
client_app = make_client_app()
server_app = make_server_app()

__all__ = ["client_app", "load_run", "make_client_app", "make_server_app", "server_app"]
