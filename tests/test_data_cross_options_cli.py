"""Data options that depend on another option, the data sets besides ``data.dataset``, and where a
model comes from: refused before torch is imported, in one line naming the option, its value and
the file that set it (issue 41, the late cases of the outside mutation run).

On 2599077 each was refused only after torch, Lightning and transformers were imported (9-13 s of
CPU): ``data.dataset: ''`` as ``folder has no .json/.jsonl/.csv/.parquet files``; the length budgets
and ``federation.clients_per_round`` against ``data.num_clients`` by the classes after the imports
(the rule was declared in the class only); ``--data.init_args={...}`` not followed; a partition
given on the command line as ``partition.key: required but missing``; a missing
``data.test_dataset`` named ``data.dataset``; an unknown ``model_type`` as ``backbone.config: unknown
model_type 'gpt9'``; an uncached hub id offline in transformers' words, naming no option. The
children cannot import torch (``tests/helpers/cli.py``); each runs in an empty folder, which stays
empty.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from huggingface_hub import constants

from lightning_fed.shipped_configs import resolve_config
from tests.helpers.cli import REACHED_TORCH, no_torch_env, run_process
from tests.helpers.refusals import assert_config_refused_before_torch, assert_refused_before_torch

HUB_CACHE = constants.HF_HUB_CACHE
TINY = yaml.safe_load(Path(resolve_config("tiny")).read_text(encoding="utf-8"))
MISSING = (
    "no such file or folder (supported: .json, .jsonl, .csv, .parquet files or a folder of them;"
    " a hub name is owner/name)"
)


def _set(config: dict, path: str, value: object) -> None:
    *parents, last = path.split(".")
    for key in parents:
        config = config[key]
    if value is None:
        del config[last]
    else:
        config[last] = value


FILE_CASES = {
    "dataset_empty": (  # `folder has no .json/.jsonl/.csv/.parquet files` (the working folder), 9.6 s
        [("data.init_args.dataset", "")],
        "data.dataset must be a hub name (owner/name), a local file or folder, or synthetic:<name>, got ''",
    ),
    "max_prompt_negative": (
        [("data.init_args.max_prompt_length", -3)],
        "data.max_prompt_length must be in [1, data.max_length=160), got -3",
    ),
    "max_prompt_too_long": (
        [("data.init_args.max_prompt_length", 500)],
        "data.max_prompt_length must be in [1, data.max_length=160), got 500",
    ),
    "max_completion_too_long": (
        [("data.init_args.max_completion_length", 160)],
        "data.max_completion_length must be in [1, data.max_length=160), got 160",
    ),
    "min_prompt_above_max_prompt": (
        [("data.init_args.max_prompt_length", 20), ("data.init_args.min_prompt_length", 30)],
        "data.min_prompt_length=30 must be <= data.max_prompt_length=20",
    ),
    "synthetic_clients_conflict": (
        [("data.init_args.synthetic_args.num_clients", 3)],
        "data.synthetic_args.num_clients=3 conflicts with data.num_clients=4;"
        " leave synthetic_args.num_clients out (it is data.num_clients)",
    ),
    "clients_per_round_above_clients": (  # 10.3 s
        [("federation.clients_per_round", 10)],
        "federation.clients_per_round=10 exceeds data.num_clients=4",
    ),
    "val_dataset_missing": (
        [("data.init_args.val_dataset", "nope.jsonl")],
        f"data.val_dataset 'nope.jsonl': {MISSING}",
    ),
    "model_type_unknown": (  # `backbone.config: unknown model_type 'gpt9'`, 11 s
        [("model.init_args.backbone.config.model_type", "gpt9")],
        "model.backbone.config.model_type 'gpt9' is no model type of the installed transformers; did you mean 'gpt2'?",
    ),
    "hub_id_offline_not_cached": (  # transformers' "Cannot find the requested files in the disk cache", 11 s
        [("model.init_args.backbone.config", None), ("model.init_args.backbone.name_or_path", "nobody/nomodel")],
        f"model.backbone.name_or_path 'nobody/nomodel': no such local folder, and not in the hub cache ({HUB_CACHE})"
        " while offline (HF_HUB_OFFLINE=1: nothing is downloaded)",
    ),
}


@pytest.mark.parametrize(("changes", "line"), list(FILE_CASES.values()), ids=list(FILE_CASES))
def test_a_data_or_model_source_value_is_refused_before_torch_naming_the_file(tmp_path, changes, line):
    config = yaml.safe_load(yaml.safe_dump(TINY))
    for path, value in changes:
        _set(config, path, value)
    assert_config_refused_before_torch(tmp_path, config, line, name="my.yaml")


COMMAND_LINE_CASES = {
    "data_init_args_json": (  # 10.7 s
        ["fit", '--data.init_args={"num_clients": -1}'],
        "data.num_clients must be in [1, 1000000], got -1",
    ),
    "model_init_args_json": (["fit", '--model.init_args={"lr": -1}'], "model.lr must be in (0, 10.0], got -1.0"),
    "data_json": (
        ["fit", '--data={"init_args": {"batch_size": 0}}'],
        "data.batch_size must be >= 1, got 0",
    ),
    "partition_on_the_command_line": (  # `partition.key: required but missing from the config`, 11 s
        ["fit", "--data.init_args.partition=Dirichlet", "--data.init_args.partition.alpha=-1"],
        "data.partition.alpha must be > 0, got -1.0; data.partition.key is required by Dirichlet but missing",
    ),
    "test_dataset_missing": (  # named `data.dataset`, 13.4 s
        ["test", "--data.init_args.test_dataset=nope.jsonl"],
        f"data.test_dataset 'nope.jsonl': {MISSING}",
    ),
    "val_dataset_missing_validate": (
        ["validate", "--data.init_args.val_dataset=./nope/"],
        f"data.val_dataset './nope/': {MISSING}",
    ),
}


@pytest.mark.parametrize(("args", "line"), list(COMMAND_LINE_CASES.values()), ids=list(COMMAND_LINE_CASES))
def test_a_value_on_the_command_line_is_refused_before_torch_naming_no_file(tmp_path, args, line):
    subcommand, *rest = args
    assert_refused_before_torch(tmp_path, [subcommand, "--config", "tiny", *rest], line)


def test_an_online_hub_id_is_left_to_the_model_loader(tmp_path):
    """Online, a hub id is the hub's to find: the precheck lets it through to the live parser."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**no_torch_env(tmp_path / "hook"), "HF_HUB_OFFLINE": "0"}
    backbone = ["--model.init_args.backbone.config=null", "--model.init_args.backbone.name_or_path=nobody/nomodel"]
    proc = run_process([sys.executable, "-m", "lightning_fed", "fit", "--config", "tiny", *backbone], cwd=cwd, env=env)
    assert REACHED_TORCH in proc.stderr


def test_the_data_modules_whose_synthetic_clients_only_size_the_set_are_declared():
    """:data:`~lightning_fed.data_cross_rules.SYNTHETIC_SIZES_ONLY` is the classes' own flag, read here."""
    import lightning_fed.datamodules as datamodules
    from lightning_fed.data_cross_rules import SYNTHETIC_SIZES_ONLY
    from lightning_fed.option_rules import DATA_RULES

    sizes_only = {name for name in DATA_RULES if not getattr(datamodules, name).synthetic_clients_are_num_clients}
    assert sizes_only == SYNTHETIC_SIZES_ONLY
