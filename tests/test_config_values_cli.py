"""A bad config value is refused before torch is imported: its line, exit 2, nothing written (issue 41, item 9).

Before, ``fit --config tiny --model.init_args.lr=-1`` said the same line only once the LightningCLI
had imported torch, Lightning, transformers and PEFT and built the class (11.2 s of CPU from the
installed wheel, benchmarks/RESULTS.md). The error is the class's line, alone (no ``--debug`` hint:
``--debug`` would show only the precheck's traceback), after the file that set the value if a file
did (issue 41). The child processes here cannot import torch (a ``sitecustomize`` refuses it): a refusal that needed
the live classes would end in that import error instead of the option's line. Files and
overrides are merged in the order given, as jsonargparse merges them; what the precheck cannot
know (a user's own class) goes on to the live parser, shown here by reaching the refused torch
import.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch


def _cli(tmp_path: Path, *args: str):
    """``lightning-fed ARGS`` from ``tmp_path``, torch unimportable, the run folder ``tmp_path/run``."""
    root = f"--trainer.default_root_dir={tmp_path / 'run'}"
    return lightning_fed_without_torch(*args, root, cwd=tmp_path, hook=tmp_path / "hook")


def _file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


CASES = {
    "lr_negative": (["--model.init_args.lr=-1"], "model.lr must be in (0, 10.0], got -1.0"),
    "lr_without_init_args_space_form": (["--model.lr", "20"], "model.lr must be in (0, 10.0], got 20.0"),
    "beta_nan": (["--model.init_args.beta=.nan"], "model.beta must be a finite number, got nan"),
    "beta_nan_string": (["--model.init_args.beta=nan"], "model.beta must be a finite number, got nan"),
    # the LoRA options are named as every model option is, by their key without init_args (issue 41)
    "lora_alpha_huge": (
        ["--model.init_args.lora.alpha=1e300"],
        "model.lora.alpha must be in (0, 1000000.0], got 1e+300",
    ),
    "lora_r_zero": (["--model.lora.r=0"], "model.lora.r must be > 0, got 0"),
    "lora_r_word": (["--model.init_args.lora.r=abc"], "model.lora.r must be an integer > 0, got 'abc'"),
    "lora_alpha_inf": (["--model.init_args.lora.alpha=inf"], "model.lora.alpha must be a finite number, got inf"),
    "lora_dropout_nan": (["--model.lora.dropout=nan"], "model.lora.dropout must be a finite number, got nan"),
    "lora_target_modules_empty": (
        ["--model.init_args.lora.target_modules=[]"],
        "model.lora.target_modules must be None or a non-empty list, got []",
    ),
    "perfedavg_shorthand": (
        ["--model", "PerFedAvgModule", "--model.inner_lr=0"],
        "model.inner_lr must be in (0, 10.0], got 0.0",
    ),
    "rounds_zero": (["--federation.rounds=0"], "federation.rounds must be in [1, 1000000], got 0"),
    "local_steps_float": (
        ["--federation.local_steps=2.5"],
        "federation.local_steps must be an integer in [1, 1000000] or null, got 2.5",
    ),
    "eval_every_zero": (["--federation.eval_every=0"], "federation.eval_every must be >= 1, got 0"),
    "num_clients_zero": (["--data.init_args.num_clients=0"], "data.num_clients must be in [1, 1000000], got 0"),
    "on_overflow_choice": (
        ["--data.on_overflow=cut"],
        "data.on_overflow must be one of ('error', 'truncate', 'drop'), got 'cut'",
    ),
    "trainer_max_epochs": (["--trainer.max_epochs=-5"], "trainer.max_epochs must be >= 0, or -1 for no limit, got -5"),
    # found from outside: these took the slow path (torch imported first, ~11 s of CPU)
    "seed_negative": (["--seed_everything=-1"], "seed_everything must be in [0, 4294967295], got -1"),
    "seed_too_big": (["--seed_everything", "4294967296"], "seed_everything must be in [0, 4294967295], got 4294967296"),
    # red team 15: a quoted value on the command line stays text, the parser's `Expected a <class 'bool'>` after torch
    "seed_quoted": (
        ['--seed_everything="5000000000"'],
        "seed_everything must be an integer in [0, 4294967295], true (PL_GLOBAL_SEED, else 0) or false,"
        " got '5000000000'",
    ),
    "fedprox_mu": (
        ["--federation.strategy=FedProx", "--federation.strategy.init_args.mu=-1"],
        "federation.strategy.mu must be > 0, got -1.0",
    ),
    "fedadam_beta_1": (
        ["--federation.strategy=lightning_fed.strategies.FedAdam", "--federation.strategy.beta_1=1"],
        "federation.strategy.beta_1 must be in [0, 1), got 1.0",
    ),
    "fedadam_tau_nan": (
        ["--federation.strategy=FedAdam", "--federation.strategy.init_args.tau=nan"],
        "federation.strategy.tau must be a finite number, got nan",
    ),
    "fedavg_server_lr": (["--federation.strategy.server_lr=0"], "federation.strategy.server_lr must be > 0, got 0.0"),
    "trimmed_mean_trim": (
        ["--federation.strategy", "TrimmedMean", "--federation.strategy.trim", "0.5"],
        "federation.strategy.trim must be in [0, 0.5), got 0.5",
    ),
}
# options the classes alone checked (after torch, ~11 s of CPU), declared in option_rules (issue 41)
CONFIG_CASES = {
    "fedbiscuit_even_selectors": (
        ["--config", "fedbiscuit_tiny", "--federation.strategy.num_selectors=4"],
        "federation.strategy.num_selectors must be >= 1 and odd, got 4",
    ),
    "selector_module_even_selectors": (
        ["--config", "fedbiscuit_tiny", "--model.num_selectors=2"],
        "model.num_selectors must be >= 1 and odd, got 2",
    ),
    "hetlora_penalty_without_gamma": (
        ["--config", "feddpo_hetlora", "--federation.strategy.prune_gamma=null"],
        "federation.strategy.rank_penalty needs federation.strategy.prune_gamma, got 0.1 without it",
    ),
    "hetlora_penalty_given_as_integer": (
        [
            "--config",
            "feddpo_hetlora",
            "--federation.strategy.prune_gamma=null",
            "--federation.strategy.rank_penalty=2",
        ],
        "federation.strategy.rank_penalty needs federation.strategy.prune_gamma, got 2.0 without it",
    ),
}


@pytest.mark.parametrize(("args", "line"), list(CONFIG_CASES.values()), ids=list(CONFIG_CASES))
def test_a_class_only_check_is_made_before_torch(tmp_path, args, line):
    proc = _cli(tmp_path, "fit", *args)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("overrides", "line"), list(CASES.values()), ids=list(CASES))
def test_a_bad_value_on_the_command_line_is_refused_before_torch(tmp_path, overrides, line):
    proc = _cli(tmp_path, "fit", "--config", "tiny", *overrides)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert not (tmp_path / "run").exists()


def test_a_later_override_replaces_an_earlier_bad_value(tmp_path):
    bad = _file(tmp_path, "bad.yaml", "federation:\n  rounds: 0\n")
    refused = _cli(tmp_path, "fit", "--config", "tiny", "--config", bad)
    assert (refused.returncode, refused.stderr) == (
        2,
        f"error: config {bad!r}: federation.rounds must be in [1, 1000000], got 0\n",
    )
    fixed = _cli(tmp_path, "fit", "--config", "tiny", "--config", bad, "--federation.rounds=2")
    assert REACHED_TORCH in fixed.stderr and "must be" not in fixed.stderr
    # and the other way round: a file after the override wins
    again = _cli(tmp_path, "fit", "--config", "tiny", "--federation.rounds=2", "--config", bad)
    line = "federation.rounds must be in [1, 1000000], got 0"
    assert (again.returncode, again.stderr) == (2, f"error: config {bad!r}: {line}\n")


def test_the_file_named_is_the_one_that_last_set_the_value(tmp_path):
    """As jsonargparse merges: a later file's value wins and is named; a value an option set names no file."""
    first = _file(tmp_path, "first.yaml", "federation:\n  rounds: 0\n")
    second = _file(tmp_path, "second.yaml", "federation:\n  rounds: -1\n")
    proc = _cli(tmp_path, "fit", "--config", "tiny", "--config", first, "--config", second)
    line = "federation.rounds must be in [1, 1000000], got -1"
    assert (proc.returncode, proc.stderr) == (2, f"error: config {second!r}: {line}\n")
    proc = _cli(tmp_path, "fit", "--config", "tiny", "--config", second, "--federation.rounds=0")
    assert (proc.returncode, proc.stderr) == (2, "error: federation.rounds must be in [1, 1000000], got 0\n")
    assert not (tmp_path / "run").exists()


STRATEGY_FILES = {
    "strategy_values_over_the_shipped_class": (
        "fedbiot",
        "federation:\n  strategy:\n    init_args: {mu: 0}\n",
        "federation.strategy.mu must be > 0, got 0.0",
    ),
    "another_strategy_class": (
        "tiny",
        "federation:\n  strategy:\n    class_path: lightning_fed.strategies.fedavgm.FedAvgM\n"
        "    init_args: {momentum: 1.0}\n",
        "federation.strategy.momentum must be in [0, 1), got 1.0",
    ),
    "fedbiscuit_schedule": (
        "fedbiscuit_tiny",
        "federation:\n  strategy:\n    class_path: FedBiscuit\n    init_args: {regroup_every: 0}\n",
        "federation.strategy.regroup_every must be >= 1, got 0",
    ),
    "hook_option": (
        "fedbiscuit_tiny",
        "federation:\n  hooks:\n    - class_path: lightning_fed.round_hooks.client_grouping.ClientGrouping\n"
        "      init_args: {clip_loss: 0}\n",
        "federation.hooks[0].clip_loss must be > 0, got 0.0",
    ),
    "second_hook_option": (
        "fedbiot",
        "federation:\n  hooks:\n    - EmulatorAlignment\n    - class_path: EmulatorAlignment\n"
        "      init_args: {kl_direction: backward}\n",
        "federation.hooks[1].kl_direction must be one of ('eq2', 'teacher_first'), got 'backward'",
    ),
    "lr_schedule_hook": (  # the red team's case: RoundLRSchedule lives in callbacks/, named by its short name
        "tiny",
        "federation:\n  hooks:\n    - class_path: RoundLRSchedule\n      init_args: {schedule: bogus}\n",
        "federation.hooks[0].schedule must be one of ('constant', 'cosine', 'step'), got 'bogus'",
    ),
    "seed_in_a_file": ("tiny", "seed_everything: -7\n", "seed_everything must be in [0, 4294967295], got -7"),
    # red team 15: a file's quoted integer is the integer: Lightning's line after torch, naming no file
    "seed_quoted_in_a_file": ("tiny", 'seed_everything: "-1"\n', "seed_everything must be in [0, 4294967295], got -1"),
}


@pytest.mark.parametrize(("config", "later", "line"), list(STRATEGY_FILES.values()), ids=list(STRATEGY_FILES))
def test_a_strategy_or_hook_value_in_a_config_file_is_refused_before_torch(tmp_path, config, later, line):
    """The strategies' and round hooks' rules are declared beside the others (lightning_fed/option_rules.py)."""
    path = _file(tmp_path, "later.yaml", later)
    proc = _cli(tmp_path, "fit", "--config", config, "--config", path)
    assert (proc.returncode, proc.stderr) == (2, f"error: config {path!r}: {line}\n")
    assert not (tmp_path / "run").exists()


def test_a_removed_subcommand_and_an_unwritable_root_are_refused_before_torch(tmp_path):
    """Both were said after the imports (``predict``: 12 s of CPU; a read-only
    ``trainer.default_root_dir``: after the model was built)."""
    from lightning_fed.config_precheck import REMOVED

    proc = _cli(tmp_path, "predict", "--config", "tiny")
    assert (proc.returncode, proc.stderr) == (2, f"error: {REMOVED['predict']}\n")
    a_file = _file(tmp_path, "run", "")  # _cli's trainer.default_root_dir
    proc = _cli(tmp_path, "fit", "--config", "tiny")
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: trainer.default_root_dir '{a_file}': '{a_file}' is a file, not a folder\n",
    )


UNKNOWN_OPTIONS = {
    "fedadam_eta": (
        ["--federation.strategy=FedAdam", "--federation.strategy.init_args.eta=0.1"],
        "federation.strategy.eta is not an option of FedAdam; did you mean federation.strategy.tau?",
    ),
    "fedavg_mu": (
        ["--federation.strategy.init_args.mu=-1"],
        "federation.strategy.mu is not an option of FedAvg; its options: server_lr, weighting",
    ),
}


@pytest.mark.parametrize(("overrides", "line"), list(UNKNOWN_OPTIONS.values()), ids=list(UNKNOWN_OPTIONS))
def test_an_option_the_strategy_does_not_take_is_refused_before_torch(tmp_path, overrides, line):
    """Found from outside: the live parser said "Option 'eta' is not accepted" after ~11 s of CPU."""
    proc = _cli(tmp_path, "fit", "--config", "tiny", *overrides)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert not (tmp_path / "run").exists()


LATER_FILES = {
    "hook_template": (
        ["fit", "--config", "fedbiot"],
        "federation:\n  hooks:\n    - class_path: lightning_fed.round_hooks.EmulatorAlignment\n"
        "      init_args: {dataset: 'synthetic:instructions', template: markdown}\n",
        "federation.hooks[0].template must be one of ('alpaca', 'plain', 'chat'), got 'markdown'",
    ),
    "bad_value_in_a_later_file": (
        ["validate", "--config", "tiny"],
        "model:\n  class_path: lightning_fed.modules.DPOModule\n  init_args:\n    beta: 0\n",
        "model.beta must be in (0, 1000.0], got 0.0",
    ),
    # found from outside: `model: {init_args: {lr: -1}}` layered over `tiny` (no `class_path`) was left
    # to the live parser (same line, 12 s of CPU); the class is the earlier one's
    "init_args_alone_apply_to_the_earlier_class": (
        ["fit", "--config", "tiny"],
        "model:\n  init_args:\n    lr: -1\ndata:\n  init_args:\n    num_clients: 2\n",
        "model.lr must be in (0, 10.0], got -1.0",
    ),
    "an_option_a_hook_does_not_take": (
        ["fit", "--config", "fedbiscuit_tiny"],
        "federation:\n  hooks:\n    - class_path: ClientGrouping\n      init_args: {clip_los: 1.0}\n",
        "federation.hooks[0].clip_los is not an option of ClientGrouping; did you mean federation.hooks[0].clip_loss?",
    ),
}


@pytest.mark.parametrize(("args", "later", "lines"), list(LATER_FILES.values()), ids=list(LATER_FILES))
def test_a_bad_value_in_a_later_config_file_is_refused_before_torch(tmp_path, args, later, lines):
    path = _file(tmp_path, "later.yaml", later)
    proc = _cli(tmp_path, *args, "--config", path)
    assert (proc.returncode, proc.stderr) == (2, f"error: config {path!r}: {lines}\n")
    assert not (tmp_path / "run").exists()


LEFT_TO_THE_LIVE_PARSER = {
    "a_strategy_of_another_package": ["--federation.strategy=my_package.FedProx", "--federation.strategy.mu=-1"],
    "a_user_s_own_class": ["--model", "my_package.DPOModule", "--model.lr=-1"],
    # tiny's DPOModule values are not judged as SFTModule's (jsonargparse decides what carries over)
    "another_class_drops_the_earlier_class_s_values": ["--config", "{bad_beta}", "--model", "SFTModule"],
}


@pytest.mark.parametrize("overrides", list(LEFT_TO_THE_LIVE_PARSER.values()), ids=list(LEFT_TO_THE_LIVE_PARSER))
def test_what_the_precheck_cannot_know_is_left_to_the_live_parser(tmp_path, overrides):
    # a user's package on the path (the working folder: `python -m`), its classes named as the package's
    _file(tmp_path, "my_package.py", "class FedProx:\n    pass\n\n\nclass DPOModule:\n    pass\n")
    bad_beta = _file(tmp_path, "b.yaml", "model:\n  class_path: DPOModule\n  init_args:\n    beta: -1\n")
    proc = _cli(tmp_path, "fit", "--config", "tiny", *(o.format(bad_beta=bad_beta) for o in overrides))
    assert REACHED_TORCH in proc.stderr and "must be" not in proc.stderr
