"""A round hook's or a strategy wrapper's option refused before torch is imported, in one line naming
its full option path, its value and the file (red team 8's report, rows 6-13 and 21).

On 52f9c49 each of these was refused after torch, Lightning and transformers were imported (10-14 s
of CPU), most in two lines (jsonargparse's or the class's message and a hint), without the hook's
``[i]`` or the file; or was refused early under the wrong option path. The children cannot import
torch (``tests/helpers/cli.py``): a refusal that still needed the live run ends in that import error
instead; each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml

from tests.helpers.refusals import (
    assert_config_refused_before_torch,
    assert_refused_before_torch,
    shipped_config,
    write_config,
)


def _hook(options: dict) -> Callable[[dict], None]:
    def mutate(config: dict) -> None:
        config["federation"]["hooks"][0]["init_args"].update(options)

    return mutate


def _wrapped(options: dict) -> Callable[[dict], None]:
    """feddpo_dp's ClientLevelDP, ``options`` given to it (``strategy``: to the FedAdam it wraps)."""

    def mutate(config: dict) -> None:
        init_args = config["federation"]["strategy"]["init_args"]
        init_args["strategy"]["init_args"].update(options.pop("strategy", {}))
        init_args.update(options)

    return mutate


def _short_hook(options: dict) -> Callable[[dict], None]:
    """The hook named by its short class name (``SystemHeterogeneity``), as the docs show it."""

    def mutate(config: dict) -> None:
        hook = config["federation"]["hooks"][0]
        hook["class_path"] = hook["class_path"].rpartition(".")[2]
        hook["init_args"].update(options)

    return mutate


FILE_CASES = {
    "short_name_unknown_key": (  # red team 8 row 8 (r04d)
        "feddpo_stragglers",
        _short_hook({"deadlin": 3}),
        "federation.hooks[0].deadlin is not an option of SystemHeterogeneity;"
        " did you mean federation.hooks[0].deadline?",
    ),
    "seed_negative": (  # row 7 (h07g)
        "feddpo_stragglers",
        _hook({"seed": -1}),
        "federation.hooks[0].seed must be in [0, 4294967295], got -1",
    ),
    "seed_huge": (  # h07h: accepted on 52f9c49
        "feddpo_stragglers",
        _hook({"seed": 2**32}),
        "federation.hooks[0].seed must be in [0, 4294967295], got 4294967296",
    ),
    "seed_bool": (  # row 9 (h07, a03)
        "feddpo_fedbuff",
        _hook({"seed": False}),
        "federation.hooks[0].seed must be an integer in [0, 4294967295], got False",
    ),
    "seed_float": (  # row 9 (h07d)
        "feddpo_stragglers",
        _hook({"seed": 1.5}),
        "federation.hooks[0].seed must be an integer in [0, 4294967295], got 1.5",
    ),
    "ranks_seed_negative": (  # row 7 (k05)
        "feddpo_hetlora",
        _hook({"seed": -1}),
        "federation.hooks[0].seed must be in [0, 4294967295], got -1",
    ),
    "async_concurrency_0": (  # row 10 (a01)
        "feddpo_fedbuff",
        _hook({"concurrency": 0}),
        "federation.hooks[0].concurrency must be >= 1, got 0",
    ),
    "ranks_choice_0": (  # row 10 (k01)
        "feddpo_hetlora",
        _hook({"choices": [0, 8]}),
        "federation.hooks[0].choices[0]: a rank must be a positive integer, got 0",
    ),
    "ranks_choices_word": (  # row 10 (k02)
        "feddpo_hetlora",
        _hook({"choices": "four"}),
        "federation.hooks[0].choices must be a list of positive integers or null, got 'four'",
    ),
    "ranks_probabilities": (  # row 10 (k04)
        "feddpo_hetlora",
        _hook({"probabilities": [0.5, 0.5, 0.5]}),
        "federation.hooks[0].probabilities: must be >= 0 and sum to 1, got [0.5, 0.5, 0.5]",
    ),
    "dp_adaptive_list": (  # row 11 (d06)
        "feddpo_dp",
        _wrapped({"adaptive": [0.5]}),
        "federation.strategy.adaptive must be a mapping with keys target_quantile, learning_rate, count_stddev,"
        " got [0.5]",
    ),
    "dp_adaptive_true": (  # row 11 (x02)
        "feddpo_dp",
        _wrapped({"adaptive": True}),
        "federation.strategy.adaptive must be a mapping with keys target_quantile, learning_rate, count_stddev,"
        " got True",
    ),
    "dp_wrapped_beta_1": (  # row 12 (d12): named federation.strategy.beta_1, which ClientLevelDP does not take
        "feddpo_dp",
        _wrapped({"strategy": {"beta_1": 2}}),
        "federation.strategy.strategy.beta_1 must be in [0, 1), got 2.0",
    ),
}


@pytest.mark.parametrize(("shipped", "mutate", "line"), list(FILE_CASES.values()), ids=list(FILE_CASES))
def test_a_hook_value_in_a_file_is_refused_in_one_line_before_torch(tmp_path, shipped, mutate, line):
    config = shipped_config(shipped)
    mutate(config)
    assert_config_refused_before_torch(tmp_path, config, line)


COMMAND_LINE_CASES = {
    "short_name_unknown_key": (  # red team 8 row 8 (r04)
        [
            "fit",
            "--config",
            "tiny",
            "--federation.hooks=[{class_path: RoundLRSchedule, init_args: {schedul: cosine}}]",
        ],
        "federation.hooks[0].schedul is not an option of RoundLRSchedule; did you mean federation.hooks[0].schedule?",
    ),
    "short_name_unknown_key_validate": (  # row 8b (q06)
        [
            "validate",
            "--config",
            "tiny",
            "--federation.hooks=[{class_path: RoundLRSchedule, init_args: {schedul: cosine}}]",
        ],
        "federation.hooks[0].schedul is not an option of RoundLRSchedule; did you mean federation.hooks[0].schedule?",
    ),
    "short_name_ranks_unknown_key": (  # row 8 (n01)
        [
            "fit",
            "--config",
            "feddpo_hetlora",
            "--federation.hooks=[{class_path: ClientRanks, init_args: {choises: [4]}}]",
        ],
        "federation.hooks[0].choises is not an option of ClientRanks; did you mean federation.hooks[0].choices?",
    ),
    "seed_bool": (  # row 9 (h07b)
        [
            "fit",
            "--config",
            "feddpo_stragglers",
            "--federation.hooks=[{class_path: SystemHeterogeneity, init_args: {seed: true}}]",
        ],
        "federation.hooks[0].seed must be an integer in [0, 4294967295], got True",
    ),
    "print_config_seed_negative": (  # row 6 (pc02): --print_config printed what fit refuses
        [
            "fit",
            "--config",
            "feddpo_stragglers",
            "--federation.hooks=[{class_path: SystemHeterogeneity, init_args: {seed: -1}}]",
            "--print_config",
        ],
        "federation.hooks[0].seed must be in [0, 4294967295], got -1",
    ),
    "synthetic_seed_negative": (  # row 7 (sy05)
        [
            "fit",
            "--config",
            "tiny",
            "--data.init_args.synthetic_args={examples_per_client: 24, groups: [positive], seed: -1}",
        ],
        "data.synthetic_args.seed must be in [0, 4294967295], got -1",
    ),
    "cosine_floor_above_lr": (  # row 21 (r06): ran to the end, the rate climbing from 0.005 to 100
        ["fit", "--config", "tiny", "--federation.hooks=[{class_path: RoundLRSchedule, init_args: {min_lr: 100.0}}]"],
        "federation.hooks[0].min_lr=100.0 is above model.lr=0.005: the cosine schedule's floor would raise the rate"
        " every round",
    ),
    "indexed_hook_option": (  # row 20 (h01): suggested --federation.on_large_update
        ["fit", "--config", "feddpo_stragglers", "--federation.hooks[0].init_args.deadline=abc"],
        "unknown option --federation.hooks[0].init_args.deadline for `lightning-fed fit`; a list's item is not"
        " indexed on the command line: --federation.hooks.init_args.deadline sets the last item's option,"
        " --federation.hooks='[...]' gives the whole list",
    ),
}


@pytest.mark.parametrize(("args", "line"), list(COMMAND_LINE_CASES.values()), ids=list(COMMAND_LINE_CASES))
def test_a_hook_value_on_the_command_line_is_refused_in_one_line_before_torch(tmp_path, args, line):
    assert_refused_before_torch(tmp_path, args, line)


SECOND_FILE_CASES = {  # red team 9 rows 9 and 10: on 9e8f7fb refused after the imports, two lines, no file named
    "async_slow_fraction": (
        "feddpo_fedbuff",
        {"class_path": "AsyncArrivals", "init_args": {"concurrency": 4, "local_steps": 10, "slow_fraction": 1.5}},
        "federation.hooks[0].slow_fraction must be in [0, 1], got 1.5",
    ),
    "async_slow_factor": (
        "feddpo_fedbuff",
        {"class_path": "AsyncArrivals", "init_args": {"concurrency": 4, "local_steps": 10, "slow_factor": 0}},
        "federation.hooks[0].slow_factor must be >= 1, got 0.0",
    ),
    "async_local_steps": (
        "feddpo_fedbuff",
        {"class_path": "AsyncArrivals", "init_args": {"concurrency": 4, "local_steps": 0}},
        "federation.hooks[0].local_steps must be in [1, 1000000], got 0",
    ),
    "ranks_none": (
        "feddpo_hetlora",
        {"class_path": "ClientRanks", "init_args": {"choices": None}},
        "federation.hooks[0]: give exactly one of per_client, choices, column (got none)",
    ),
    "ranks_both": (
        "feddpo_hetlora",
        {"class_path": "ClientRanks", "init_args": {"choices": [4, 8], "per_client": [4, 8, 4, 8]}},
        "federation.hooks[0]: give exactly one of per_client, choices, column (got ['per_client', 'choices'])",
    ),
    "async_concurrency_above_clients": (  # aa_concbig: on 3ce5a2c two lines after the imports (14 s of CPU)
        "feddpo_fedbuff",
        {"class_path": "AsyncArrivals", "init_args": {"concurrency": 1000000000, "local_steps": 10}},
        "federation.hooks[0].concurrency must be in [1, data.num_clients=8], got 1000000000",
    ),
    "ranks_above_lora_r": (  # cr_ch_4100000: on e514ac1 two lines after the imports (11 s of CPU)
        "feddpo_hetlora",
        {"class_path": "ClientRanks", "init_args": {"choices": [4, 100000]}},
        "federation.hooks[0].choices: ranks above the global LoRA rank model.lora.r=16, got [100000]",
    ),
    "per_client_ranks_above_lora_r": (
        "feddpo_hetlora",
        {"class_path": "ClientRanks", "init_args": {"choices": None, "per_client": [4, 8, 16, 32, 4, 8, 16, 32]}},
        "federation.hooks[0].per_client: ranks above the global LoRA rank model.lora.r=16, got [32]",
    ),
    "per_client_not_one_per_client": (  # red team 10 row 6b (n2): on a8354b9 two lines after the imports (13 s)
        "feddpo_hetlora",
        {"class_path": "ClientRanks", "init_args": {"choices": None, "per_client": [4, 8, 4]}},
        "federation.hooks[0].per_client: 3 ranks for data.num_clients=8 (one per client), got [4, 8, 4]",
    ),
}


@pytest.mark.parametrize(("shipped", "hook", "line"), list(SECOND_FILE_CASES.values()), ids=list(SECOND_FILE_CASES))
def test_a_hook_value_in_a_second_file_is_refused_in_one_line_naming_it(tmp_path, shipped, hook, line):
    """The red team's form: the shipped config, then a file of the changed hook (merged into the first's)."""
    path = tmp_path / "change.yaml"
    path.write_text(yaml.safe_dump({"federation": {"hooks": [hook]}}), encoding="utf-8")
    assert_refused_before_torch(tmp_path, ["fit", "--config", shipped, "--config", str(path)], line, config_file=path)


def test_async_arrivals_under_client_level_dp_is_refused_before_torch(tmp_path):
    """Red team 10 row 9 (c_dp_async3): on a8354b9 AsyncArrivals under ClientLevelDP(FedBuff) was refused
    by the hook's check_run after the imports (13 s of CPU), in one line naming no ``[0]`` and no file."""
    strategy = {
        "class_path": "lightning_fed.privacy.ClientLevelDP",
        "init_args": {"strategy": {"class_path": "FedBuff", "init_args": {"buffer_size": 2}}, "clip_norm": 0.05},
    }
    hooks = [{"class_path": "AsyncArrivals", "init_args": {"concurrency": 3, "local_steps": 2, "seed": 0}}]
    federation = {"privacy": {"target_epsilon": 8.0}, "strategy": strategy, "hooks": hooks}
    path = write_config(tmp_path, {"data": {"init_args": {"num_clients": 8}}, "federation": federation}, "dp.yaml")
    line = (
        "federation.hooks[0]: AsyncArrivals cannot run under federation.strategy=ClientLevelDP: its privacy"
        " accounting assumes synchronous rounds of sampled clients, which asynchronous arrivals replace;"
        " use FedBuff without ClientLevelDP, or drop AsyncArrivals"
    )
    args = ["fit", "--config", "tiny", "--config", str(path)]
    assert_refused_before_torch(tmp_path, args, line, config_file=path)


@pytest.mark.parametrize("subcommand", ["fit", "plan"])
@pytest.mark.parametrize("lora", [None, {"alpha": 32}], ids=["no_lora", "lora_without_r"])
def test_ranks_above_the_default_lora_rank_are_refused_before_torch(tmp_path, subcommand, lora):
    """Red team 10 rows 6 and 8 (r4, p18): on 3d730d7 ClientRanks ``choices: [2, 64]`` with ``model.lora.r``
    left at LoraSettings' default 8 was refused by ``fit`` only by the class, after the imports, in two
    lines naming neither the hook's ``[0]`` nor the file; ``plan`` planned it (exit 0)."""
    config = shipped_config("feddpo_hetlora")
    del config["model"]["init_args"]["lora"]
    if lora is not None:
        config["model"]["init_args"]["lora"] = lora
    path = write_config(tmp_path, config, "base.yaml")
    change = write_config(
        tmp_path,
        {"federation": {"hooks": [{"class_path": "ClientRanks", "init_args": {"choices": [2, 64]}}]}},
        "ranks.yaml",
    )
    line = "federation.hooks[0].choices: ranks above the global LoRA rank model.lora.r=8, got [64]"
    assert_refused_before_torch(
        tmp_path, [subcommand, "--config", str(path), "--config", str(change)], line, config_file=change
    )


@pytest.mark.parametrize("num_clients", ["file", "option"])
def test_a_cross_checked_value_names_the_file_that_set_it(tmp_path, num_clients):
    """Red team 10 row 10 (a2, a3): on 3d730d7 ``concurrency`` set in one file and ``data.num_clients`` in a
    second file (or on the command line) gave a line naming the second file (or none) for the ``got 5``
    the first file set."""
    hooks = [{"class_path": "AsyncArrivals", "init_args": {"concurrency": 5, "local_steps": 10}}]
    conc = write_config(tmp_path, {"federation": {"hooks": hooks}}, "conc.yaml")
    clients = write_config(tmp_path, {"data": {"init_args": {"num_clients": 3}}}, "clients.yaml")
    more = ["--config", str(clients)] if num_clients == "file" else ["--data.init_args.num_clients=3"]
    line = "federation.hooks[0].concurrency must be in [1, data.num_clients=3], got 5"
    args = ["fit", "--config", "feddpo_fedbuff", "--config", str(conc), *more]
    assert_refused_before_torch(tmp_path, args, line, config_file=conc)
