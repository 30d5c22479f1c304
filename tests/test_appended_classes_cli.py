"""Lightning's documented list forms, ``--trainer.callbacks+=EarlyStopping --trainer.callbacks.patience=5``
and ``--federation.hooks+=<hook>``, as the precheck reads them (issue 41).

On baaf8e7 a class appended with ``+=`` was not read before torch: ``--trainer.callbacks+=Nope`` and
``--federation.hooks+=Nope`` were refused after the imports (9.8 s of CPU) as ``Expected a dot
import path string: Nope``. When the shapes of class-valued options were first checked (a41, this
stop), ``--trainer.callbacks.patience=5`` after a ``+=`` was read as a key of the list itself and
the documented form was refused (``trainer.callbacks.patience is not a key of trainer.callbacks``):
the accepted cases below are that regression's test. The children cannot import torch
(``tests/helpers/cli.py``): an accepted form ends in that import error, never in a refusal.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

REFUSED = {
    "callback_name_typo": (
        ["--trainer.callbacks+=EarlyStoping"],
        "trainer.callbacks: unknown class_path 'EarlyStoping'; did you mean EarlyStopping?",
    ),
    "hook_name_typo": (
        ["--federation.hooks+=ClientGroupin"],
        "federation.hooks[0]: unknown class_path 'ClientGroupin'; did you mean ClientGrouping?",
    ),
    "logger_name_typo": (
        ["--trainer.logger+=CSVLoger"],
        "trainer.logger: unknown class_path 'CSVLoger'; did you mean CSVLogger?",
    ),
    "appended_callback_option_typo": (
        ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.patiencee=5"],
        "trainer.callbacks[0].patiencee is not an option of EarlyStopping; did you mean trainer.callbacks[0].patience?",
    ),
    "second_appended_callback_option_typo": (
        [
            "--trainer.callbacks+=EarlyStopping",
            "--trainer.callbacks.patience=5",
            "--trainer.callbacks+=LearningRateMonitor",
            "--trainer.callbacks.logging_intervall=epoch",
        ],
        "trainer.callbacks[1].logging_intervall is not an option of LearningRateMonitor;"
        " did you mean trainer.callbacks[1].logging_interval?",
    ),
    "hook_a_number": (
        ["--federation.hooks+=5"],
        "federation.hooks[0] must be a class name or a mapping of its class_path and init_args"
        " (e.g. federation.hooks[0]: {class_path: lightning_fed.round_hooks.ClientGrouping}), got 5",
    ),
}

ACCEPTED = {
    "appended_callback_options": [
        "--trainer.callbacks+=EarlyStopping",
        "--trainer.callbacks.patience=5",
        "--trainer.callbacks.monitor=val_loss",
    ],
    "two_appended_callbacks": [
        "--trainer.callbacks+=EarlyStopping",
        "--trainer.callbacks.init_args.patience=5",
        "--trainer.callbacks+=LearningRateMonitor",
        "--trainer.callbacks.logging_interval=epoch",
    ],
    "one_callback_then_its_option": ["--trainer.callbacks=EarlyStopping", "--trainer.callbacks.patience=5"],
    "logger_then_its_option": ["--trainer.logger=CSVLogger", "--trainer.logger.save_dir=logs"],
    "appended_logger_option": ["--trainer.logger+=CSVLogger", "--trainer.logger.save_dir=logs"],
    "appended_hook": ["--federation.hooks+=RoundLRSchedule"],  # ClientRanks under tiny's FedAvg: refused now
    "appended_mapping": ["--trainer.callbacks+={class_path: EarlyStopping, init_args: {patience: 3}}"],
}


@pytest.mark.parametrize(("options", "line"), list(REFUSED.values()), ids=list(REFUSED))
def test_an_appended_class_is_checked_before_torch(tmp_path, options, line):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch("fit", "--config", "tiny", *options, cwd=cwd, hook=tmp_path / "hook")
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("options", list(ACCEPTED.values()), ids=list(ACCEPTED))
def test_the_documented_list_forms_go_on_to_the_live_parser(tmp_path, options):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch("fit", "--config", "tiny", *options, cwd=cwd, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr, proc.stderr
