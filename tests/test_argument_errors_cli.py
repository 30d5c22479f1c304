"""``fit``/``validate``/``test`` argument errors that the live parser found only after torch (issue 41:
"a config error <= 3 s of CPU", "one clear line naming the field and value").

On 0be92cf each of these was reported by the LightningCLI's parser or Lightning's ``Trainer``
after torch, Lightning and transformers were imported (9-13 s of CPU each, measured with
``/usr/bin/time`` from the installed console script), several naming no value
(``trainer.max_epochs: Expected a <class 'int'>``) or no close class, and ``fit`` alone said
``tip: lightning-fed --help`` without the subcommand. The children here cannot import torch
(:func:`tests.helpers.cli.lightning_fed_without_torch`): a refusal that came after it would end
in that import error; each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch


def _run(tmp_path: Path, *args: str):
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    return lightning_fed_without_torch(*args, cwd=cwd, hook=tmp_path / "hook"), cwd


def _tip(subcommand: str) -> str:
    return f"tip: lightning-fed {subcommand} --help lists every option"


TRAINER_TYPES = {  # the parser's type check (a parse error: one line)
    "max_epochs": ("abc", "trainer.max_epochs must be an integer or null, got 'abc'"),
    "max_steps": ("1.5", "trainer.max_steps must be an integer, got 1.5"),
    "limit_val_batches": ("half", "trainer.limit_val_batches must be a number or null, got 'half'"),
    "log_every_n_steps": ("often", "trainer.log_every_n_steps must be an integer or null, got 'often'"),
    "accumulate_grad_batches": ("[2]", "trainer.accumulate_grad_batches must be an integer, got [2]"),
    "gradient_clip_val": ("big", "trainer.gradient_clip_val must be a number or null, got 'big'"),
    "num_sanity_val_steps": ("all", "trainer.num_sanity_val_steps must be an integer or null, got 'all'"),
    "deterministic": ("maybe", "trainer.deterministic must be true, false, 'warn' or null, got 'maybe'"),
    "enable_checkpointing": ("sometimes", "trainer.enable_checkpointing must be true, false or null, got 'sometimes'"),
    "fast_dev_run": ("quick", "trainer.fast_dev_run must be an integer, true or false, got 'quick'"),
}


@pytest.mark.parametrize(("value", "line"), list(TRAINER_TYPES.values()), ids=list(TRAINER_TYPES))
def test_a_trainer_option_of_the_wrong_type_is_named_with_its_value_before_torch(tmp_path, value, line):
    name = line.split()[0]
    proc, cwd = _run(tmp_path, "fit", "--config", "tiny", f"--{name}={value}")
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(cwd.iterdir()) == []


TRAINER_CHOICES = {  # what the Trainer refused when built (exit 2, one line)
    "accelerator": (
        "--trainer.accelerator=gpux",
        "trainer.accelerator must be one of auto, cpu, cuda, gpu, mps, tpu or an Accelerator's class path, got 'gpux'",
    ),
    "devices": (
        "--trainer.devices=abc",
        "trainer.devices must be a number of devices >= 1, -1 (all of them), 'auto' or a list of device indices,"
        " got 'abc'",
    ),
    "gradient_clip_algorithm": (
        "--trainer.gradient_clip_algorithm=clip",
        "trainer.gradient_clip_algorithm must be one of norm, value, got 'clip'",
    ),
}


@pytest.mark.parametrize(("arg", "line"), list(TRAINER_CHOICES.values()), ids=list(TRAINER_CHOICES))
def test_a_trainer_option_lightning_refuses_is_refused_before_torch(tmp_path, arg, line):
    proc, cwd = _run(tmp_path, "fit", "--config", "tiny", arg)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(cwd.iterdir()) == []


CLASS_PATHS = {
    "model_full_path": (
        ["--model.class_path=lightning_fed.modules.FedDPOModul"],
        "model: unknown class_path 'lightning_fed.modules.FedDPOModul'; did you mean lightning_fed.modules.DPOModule?",
    ),
    "model_short_name": (["--model", "SFTModul"], "model: unknown class_path 'SFTModul'; did you mean SFTModule?"),
    "data_full_path": (
        ["--data=lightning_fed.datamodules.PreferenceData"],
        "data: unknown class_path 'lightning_fed.datamodules.PreferenceData';"
        " did you mean lightning_fed.datamodules.PreferenceDataModule?",
    ),
    "no_close_class": (
        ["--model=Zzzz"],
        "model: unknown class_path 'Zzzz'; the package's: BinarySelectorModule, DPOModule, FedPerModule,"
        " FedRepModule, FederatedModule, ORPOModule, OffsiteModule, PDPOModule, PerFedAvgModule,"
        " PersonalHeadDPO, SFTModule, SimPOModule",
    ),
}


@pytest.mark.parametrize(("args", "line"), list(CLASS_PATHS.values()), ids=list(CLASS_PATHS))
def test_a_mistyped_class_path_names_the_closest_class_before_torch(tmp_path, args, line):
    proc, cwd = _run(tmp_path, "fit", "--config", "tiny", *args)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("section", ["model", "data"])
def test_a_mistyped_class_path_in_a_config_file_names_the_file(tmp_path, section):
    name, near = {"model": ("FedDPOModul", "DPOModule"), "data": ("PreferenceDataModul", "PreferenceDataModule")}[
        section
    ]
    path = tmp_path / "my_run.yaml"
    path.write_text(f"{section}:\n  class_path: {name}\n")
    proc, cwd = _run(tmp_path, "fit", "--config", "tiny", "--config", str(path))
    line = f"config {str(path)!r}: {section}: unknown class_path {name!r}; did you mean {near}?"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(cwd.iterdir()) == []


SHAPES = {  # argparse's own lines, with the tip naming the subcommand
    "option_without_its_value": (
        ["fit", "--config", "tiny", "--federation.rounds"],
        "argument --federation.rounds: expected one argument",
    ),
    "option_before_another_option": (
        ["fit", "--config", "tiny", "--federation.rounds", "--trainer.max_epochs", "2"],
        "argument --federation.rounds: expected one argument",
    ),
    "config_without_its_file": (["validate", "--config"], "argument -c/--config: expected one argument"),
    "stray_word": (["fit", "--config", "tiny", "foo"], "unrecognized arguments: foo"),
    "stray_words": (["test", "foo", "--config", "tiny", "bar"], "unrecognized arguments: foo bar"),
    # found from outside (issue 41): `--federation.rounds= 2` was "unrecognized arguments: 2"
    "space_after_equals": (
        ["fit", "--config", "tiny", "--federation.rounds=", "2"],
        "argument --federation.rounds: empty value after '='; did you mean --federation.rounds=2 (no space after '=')?",
    ),
    # found from outside (issue 41): said by the live parsers after the imports (12 s of CPU)
    "print_config_flag": (["fit", "--config", "tiny", "--print_config=bad"], 'Invalid option "bad" for --print_config'),
    "help_with_a_value": (["fit", "--config", "tiny", "-h=1"], "argument -h/--help: ignored explicit argument '1'"),
    "no_config": (["fit"], "fit.data, fit.model: required but missing from the config"),
    "no_data": (["validate", "--model", "DPOModule"], "validate.data: required but missing from the config"),
}


@pytest.mark.parametrize(("args", "line"), list(SHAPES.values()), ids=list(SHAPES))
def test_an_argument_error_is_refused_before_torch_with_the_subcommand_s_tip(tmp_path, args, line):
    proc, cwd = _run(tmp_path, *args)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n{_tip(args[0])}\n")
    assert list(cwd.iterdir()) == []


def test_a_negative_number_is_a_value_not_an_option(tmp_path):
    """``--trainer.max_epochs -1`` (no limit) is not an option without its value."""
    proc, _ = _run(tmp_path, "fit", "--config", "tiny", "--trainer.max_epochs", "-1", "--federation.rounds", "0")
    line = "federation.rounds must be in [1, 1000000], got 0"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")


BATCH_CLIENTS = {  # a YAML bool in a file: the parser said `Expected a <class 'int'>` after torch
    "true": "got True",
    "off": "got False (YAML reads an unquoted off as false: write 'off')",
}


@pytest.mark.parametrize(("word", "got"), list(BATCH_CLIENTS.items()), ids=list(BATCH_CLIENTS))
def test_batch_clients_as_a_yaml_bool_names_the_value_before_torch(tmp_path, word, got):
    path = tmp_path / "my_run.yaml"
    path.write_text(f"federation:\n  batch_clients: {word}\n")
    proc, cwd = _run(tmp_path, "fit", "--config", "tiny", "--config", str(path))
    line = f"config {str(path)!r}: federation.batch_clients must be 'off', 'auto' or an integer >= 1, {got}"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(cwd.iterdir()) == []


def test_batch_clients_off_on_the_command_line_is_the_word(tmp_path):
    """The parser keeps ``--federation.batch_clients=off`` as ``'off'`` (only a file's YAML makes it a bool)."""
    proc, _ = _run(tmp_path, "fit", "--config", "tiny", "--federation.batch_clients=off")
    assert REACHED_TORCH in proc.stderr and "batch_clients" not in proc.stderr


def test_the_live_parser_s_tip_names_the_subcommand_too(capsys):
    """In-process (no precheck), the LightningCLI's top parser reports the missing sections: its
    tip said ``lightning-fed --help`` on 0be92cf."""
    from lightning_fed.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["fit"])
    assert exit_.value.code == 2
    line = "fit.data, fit.model: required but missing from the config"
    assert capsys.readouterr().err.endswith(f"error: {line}\n{_tip('fit')}\n")


SUBCOMMANDS = {  # 0be92cf: `lightning-fed evaluate: error: ...` alone; `error: lightning-fed plan: ...`, --debug hint
    "evaluate_unknown": (["evaluate", "--bogus", "1"], "unrecognized arguments: --bogus 1"),
    "evaluate_close": (
        ["evaluate", "--benchmark", "[judge]"],
        "unrecognized arguments: --benchmark [judge]; did you mean --benchmarks?",
    ),
    "evaluate_list_without_brackets": (
        ["evaluate", "--run", "r", "--benchmarks", "judge"],
        "--benchmarks must be a list, quoted for the shell: --benchmarks '[judge]', got 'judge'",
    ),
    "evaluate_config_a_list": (
        ["evaluate", "--config", "{list}", "--benchmarks", "[judge]"],
        "--config '{list}' holds a list, expected a mapping of options (e.g. run: <run folder>, benchmarks: [judge])",
    ),
    "plan": (["plan", "--config", "tiny", "--bogus", "1"], "unrecognized arguments: --bogus 1"),
    "report": (["report", "runs/a", "--metrc", "loss"], "unrecognized arguments: --metrc loss; did you mean --metric?"),
    "configs": (["configs", "--pat"], "unrecognized arguments: --pat; did you mean --path?"),
}


@pytest.mark.parametrize(("args", "line"), list(SUBCOMMANDS.values()), ids=list(SUBCOMMANDS))
def test_every_subcommand_reports_an_argument_error_as_fit_does(tmp_path, args, line):
    """``error: <line>`` and the tip naming the subcommand (a close option named), before torch."""
    listed = tmp_path / "list.yaml"
    listed.write_text("- run\n- benchmarks\n")
    args = [a.format(list=listed) for a in args]
    proc, cwd = _run(tmp_path, *args)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line.format(list=listed)}\n{_tip(args[0])}\n")
    assert list(cwd.iterdir()) == []
