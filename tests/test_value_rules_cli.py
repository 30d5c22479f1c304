"""A number written as a YAML string (``lr: "1e-4"``, ``beta: "0.1"``, ``rounds: "3"``) is read as jsonargparse
reads a typed ``float``/``int`` parameter, in every section alike (issue 41 row 9: on 3df2116 ``trainer:``
took it, as jsonargparse casts it, while the precheck refused it under ``model:``, ``data:`` and
``federation:``: ``model.beta must be a number in (0, 1000.0], got '0.1'``). What the parser refuses
(``"3.0"`` for an integer, ``"nan"``) and what is out of range stay one line before torch."""

from __future__ import annotations

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch
from tests.helpers.refusals import assert_config_refused_before_torch, shipped_config, write_config


def _set(config: dict, dotted: str, value: object) -> dict:
    *path, last = dotted.split(".")
    node = config
    for key in path:
        node = node[key]
    node[last] = value
    return config


QUOTED = {
    "model.lr": ("model.init_args.lr", "1e-4"),
    "model.beta": ("model.init_args.beta", "0.1"),
    "model.lora.r": ("model.init_args.lora.r", "4"),
    "data.batch_size": ("data.init_args.batch_size", "4"),
    "data.num_clients": ("data.init_args.num_clients", " 4"),
    "federation.rounds": ("federation.rounds", "3"),
    "federation.local_steps": ("federation.local_steps", "1_0"),
    "trainer.gradient_clip_val": ("trainer.gradient_clip_val", "1.0"),
    "seed_everything": ("seed_everything", "5"),  # a file's; on the command line a quoted value is refused
}


@pytest.mark.parametrize("option", QUOTED)
def test_a_quoted_number_goes_on_to_the_parser_in_every_section(tmp_path, option):
    """The precheck passes it on (the parser casts it; tests/helpers/cli.py: torch unimportable)."""
    where, value = QUOTED[option]
    path = write_config(tmp_path, _set(shipped_config("tiny"), where, value))
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=tmp_path, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr, proc.stderr


def test_a_quoted_number_of_a_strategy_goes_on_to_the_parser(tmp_path):
    config = shipped_config("tiny")
    config["federation"]["strategy"] = {"class_path": "lightning_fed.strategies.FedProx", "init_args": {"mu": "0.01"}}
    path = write_config(tmp_path, config)
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=tmp_path, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("where", "value", "line"),
    [
        ("federation.rounds", "3.0", "federation.rounds must be an integer in [1, 1000000], got '3.0'"),
        ("model.init_args.beta", "5000", "model.beta must be in (0, 1000.0], got 5000.0"),
        ("model.init_args.beta", "nan", "model.beta must be a finite number, got nan"),
        ("data.init_args.batch_size", "four", "data.batch_size must be an integer >= 1, got 'four'"),
    ],
)
def test_a_quoted_value_the_parser_refuses_is_one_line_before_torch(tmp_path, where, value, line):
    assert_config_refused_before_torch(tmp_path, _set(shipped_config("tiny"), where, value), line)


DIRICHLET = {"class_path": "lightning_fed.datamodules.Dirichlet", "init_args": {"key": "group"}}
NESTED_QUOTED = {
    "data.partition.alpha": ("data.init_args.partition.init_args.alpha", "0.3"),
    "data.partition.max_attempts": ("data.init_args.partition.init_args.max_attempts", "50"),
    "model.backbone.config.n_embd": ("model.init_args.backbone.config.n_embd", "32"),
    "data.synthetic_args.examples_per_client": ("data.init_args.synthetic_args.examples_per_client", "24"),
}


def _with_dirichlet(config: dict) -> dict:
    config["data"]["init_args"]["partition"] = {**DIRICHLET, "init_args": {"key": "group", "alpha": 1.0}}
    return config


@pytest.mark.parametrize("option", NESTED_QUOTED)
def test_a_quoted_number_below_a_class_or_in_a_mapping_goes_on_to_the_parser(tmp_path, option):
    """``data.partition``'s ``init_args`` (typed dataclass fields) and the mapping-typed options
    (``model.backbone.config``, ``data.synthetic_args``: ``dict[str, Any]``, whose strings jsonargparse
    reads as YAML) take a quoted number as the rest of the config does (issue 41 M12: on 08c1cba
    ``data.partition.alpha must be a number, got '0.3'``, ``model.backbone.config.n_embd must be an
    integer, got '32'``, before torch; the live run casts both)."""
    where, value = NESTED_QUOTED[option]
    path = write_config(tmp_path, _set(_with_dirichlet(shipped_config("tiny")), where, value))
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=tmp_path, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("where", "value", "line"),
    [
        ("data.init_args.partition.init_args.alpha", "-1", "data.partition.alpha must be > 0, got -1.0"),
        ("data.init_args.partition.init_args.alpha", "a lot", "data.partition.alpha must be a number, got 'a lot'"),
        ("data.init_args.partition.init_args.min_size", "2.0", "data.partition.min_size must be an integer, got '2.0'"),
        ("model.init_args.backbone.config.n_embd", "3.5", "model.backbone.config.n_embd must be an integer, got 3.5"),
        ("model.init_args.backbone.config.n_head", "0", "model.backbone.config.n_head must be >= 1, got 0"),
    ],
)
def test_a_quoted_nested_value_the_parser_refuses_is_one_line_before_torch(tmp_path, where, value, line):
    assert_config_refused_before_torch(tmp_path, _set(_with_dirichlet(shipped_config("tiny")), where, value), line)


COSINE = {"class_path": "lightning_fed.callbacks.RoundLRSchedule", "init_args": {"schedule": "cosine"}}


@pytest.mark.parametrize(("lr", "min_lr"), [("0.005", "1.0"), (0.005, "1.0"), ("0.005", 1.0)])
def test_a_quoted_number_of_a_cross_check_is_held_against_the_other_option(tmp_path, lr, min_lr):
    """RoundLRSchedule's ``min_lr`` above ``model.lr`` is refused whichever of the two is quoted, as when
    neither is (red team 15 H2: on 4a8638c ``lr: "0.005"`` with ``min_lr: "1.0"``, or either quoted
    alone, passed the precheck and the run trained to the end, exit 0)."""
    config = _set(shipped_config("tiny"), "model.init_args.lr", lr)
    config["federation"]["hooks"] = [{**COSINE, "init_args": {**COSINE["init_args"], "min_lr": min_lr}}]
    line = (
        "federation.hooks[0].min_lr=1.0 is above model.lr=0.005: the cosine schedule's floor would raise"
        " the rate every round"
    )
    assert_config_refused_before_torch(tmp_path, config, line)


@pytest.mark.parametrize(("target", "per_round"), [("3", 2), (3, "2"), ("3", "2")])
def test_a_quoted_hook_target_is_held_against_clients_per_round(tmp_path, target, per_round):
    """SystemHeterogeneity's ``target`` above ``federation.clients_per_round``, either quoted (on 4a8638c
    ``target: "3"`` passed the precheck, the check comparing only ints)."""
    config = _set(shipped_config("tiny"), "federation.clients_per_round", per_round)
    config["federation"]["hooks"] = [{"class_path": "SystemHeterogeneity", "init_args": {"target": target}}]
    line = "federation.hooks[0].target=3 exceeds federation.clients_per_round=2 (the selected)"
    assert_config_refused_before_torch(tmp_path, config, line)


@pytest.mark.parametrize(("concurrency", "num_clients"), [("9", 4), (9, "4")])
def test_a_quoted_hook_concurrency_is_held_against_num_clients(tmp_path, concurrency, num_clients):
    """AsyncArrivals' ``concurrency`` above ``data.num_clients``, either quoted (on 4a8638c
    ``concurrency: "9"`` passed the precheck, the check comparing only ints)."""
    config = _set(shipped_config("feddpo_fedbuff"), "data.init_args.num_clients", num_clients)
    config["federation"]["hooks"] = [{"class_path": "AsyncArrivals", "init_args": {"concurrency": concurrency}}]
    line = "federation.hooks[0].concurrency must be in [1, data.num_clients=4], got 9"
    assert_config_refused_before_torch(tmp_path, config, line)
