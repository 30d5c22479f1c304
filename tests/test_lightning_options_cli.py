"""Lightning's own options in a copy of the shipped ``tiny`` config, refused before torch is imported
(issue 41, the outside tester's late cases on 2599077).

On 2599077 each of these went on to the live parser or the Trainer (9.7-11 s of CPU): a logger's
mistyped key as ``Option 'save_dirr' is not accepted`` (no closest), ``trainer.logger: 5`` as a cut
``Not a valid subclass of Logger Subclass types expect one of:``, a word for ``patience`` as
``Expected a <class 'int'>. Got value: lots`` (no index, no file), ``EarlyStopping(mode='sideways')``
and ``ModelCheckpoint(every_n_epochs=-5)`` as exit 1 ``MisconfigurationException`` (a failure
during training, not a config to fix). The children cannot import torch (``tests/helpers/cli.py``): an
accepted form ends in that import error, never in a refusal; each runs in an empty folder, which
stays empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lightning_fed.shipped_configs import resolve_config
from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

TINY = yaml.safe_load(Path(resolve_config("tiny")).read_text(encoding="utf-8"))
EARLY = "lightning.pytorch.callbacks.EarlyStopping"

IN_FILE = {
    "logger_option_typo": (
        {"logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dirr": "x"}}},
        "trainer.logger.save_dirr is not an option of TensorBoardLogger; did you mean trainer.logger.save_dir?",
    ),
    "logger_a_number": (
        {"logger": 5},
        "trainer.logger must be true (Lightning's default logger), false (none), a logger's class name or class"
        " path (e.g. CSVLogger), a mapping {class_path: ..., init_args: {...}} or a list of them, got 5",
    ),
    "logger_in_a_list_a_number": (
        {"logger": ["CSVLogger", 2.5]},
        "trainer.logger[1] must be true (Lightning's default logger), false (none), a logger's class name or class"
        " path (e.g. CSVLogger), a mapping {class_path: ..., init_args: {...}}, got 2.5",
    ),
    "logger_option_type": (
        {"logger": {"class_path": "CSVLogger", "init_args": {"save_dir": "x", "flush_logs_every_n_steps": "often"}}},
        "trainer.logger.flush_logs_every_n_steps must be an integer, got 'often'",
    ),
    "callback_option_type": (
        {"callbacks": [{"class_path": EARLY, "init_args": {"monitor": "x", "patience": "lots"}}]},
        "trainer.callbacks[0].patience must be an integer, got 'lots'",
    ),
    "callback_bool_option_type": (
        {"callbacks": [{"class_path": EARLY, "init_args": {"monitor": "x", "verbose": [1]}}]},
        "trainer.callbacks[0].verbose must be true or false, got [1]",
    ),
    "callback_mode": (
        {"callbacks": [{"class_path": "EarlyStopping", "init_args": {"monitor": "x", "mode": "sideways"}}]},
        "trainer.callbacks[0].mode must be one of ('min', 'max'), got 'sideways'",
    ),
    "checkpoint_every_n_epochs_negative": (
        {"callbacks": [{"class_path": "ModelCheckpoint", "init_args": {"every_n_epochs": -5}}]},
        "trainer.callbacks[0].every_n_epochs must be >= 0 or null, got -5",
    ),
    "checkpoint_save_top_k_without_monitor": (
        {"callbacks": [{"class_path": "ModelCheckpoint", "init_args": {"save_top_k": 3}}]},
        "trainer.callbacks[0].save_top_k=3 needs a monitor (the metric to rank checkpoints by); without one"
        " save_top_k must be -1, 0 or 1",
    ),
    "accumulation_factor_zero": (
        {"callbacks": [{"class_path": "GradientAccumulationScheduler", "init_args": {"scheduling": {0: 0}}}]},
        "trainer.callbacks[0].scheduling must map epochs >= 0 to accumulation factors >= 1 (e.g. {0: 4, 4: 1}),"
        " got {0: 0}",
    ),
    "exception_checkpoint_no_name": (
        {"callbacks": [{"class_path": "OnExceptionCheckpoint", "init_args": {"dirpath": ".", "filename": ""}}]},
        "trainer.callbacks[0].filename must be a file name (not empty), got ''",
    ),
    "lr_monitor_interval": (
        {"callbacks": {"class_path": "LearningRateMonitor", "init_args": {"logging_interval": "batch"}}},
        "trainer.callbacks.logging_interval must be 'step', 'epoch' or null, got 'batch'",
    ),
}

ON_COMMAND_LINE = {
    "appended_callback_option_type": (
        ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.patience=lots"],
        "trainer.callbacks[0].patience must be an integer, got 'lots'",
    ),
    "logger_init_args_typo": (
        ["--trainer.logger=CSVLogger", "--trainer.logger.init_args.save_dirr=x"],
        "trainer.logger.save_dirr is not an option of CSVLogger; did you mean trainer.logger.save_dir?",
    ),
    "logger_option_typo": (
        ["--trainer.logger=CSVLogger", "--trainer.logger.save_dirr=x"],
        "trainer.logger.save_dirr is not an option of CSVLogger; did you mean trainer.logger.save_dir?",
    ),
    "callbacks_as_json": (
        ['--trainer.callbacks=[{"class_path":"EarlyStopping","init_args":{"monitor":"x","mode":"sideways"}}]'],
        "trainer.callbacks[0].mode must be one of ('min', 'max'), got 'sideways'",
    ),
}

ACCEPTED = {
    "summary_writer_option": {
        "logger": {"class_path": "TensorBoardLogger", "init_args": {"save_dir": "x", "flush_secs": 30}}
    },
    "callbacks_at_their_bounds": {
        "callbacks": [
            {"class_path": "EarlyStopping", "init_args": {"monitor": "x", "mode": "max", "patience": 0}},
            {"class_path": "ModelCheckpoint", "init_args": {"every_n_epochs": 0, "save_top_k": -1}},
            {"class_path": "LearningRateMonitor", "init_args": {"logging_interval": None}},
        ]
    },
    "loggers_in_a_list": {"logger": ["CSVLogger", {"class_path": "CSVLogger", "init_args": {"save_dir": "x"}}]},
    "no_logger": {"logger": False},
}


def _config(tmp_path: Path, trainer: dict) -> Path:
    config = {**TINY, "trainer": {**TINY["trainer"], **trainer}}
    path = tmp_path / "my.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize(("trainer", "line"), list(IN_FILE.values()), ids=list(IN_FILE))
def test_a_lightning_option_in_a_file_is_refused_before_torch(tmp_path, trainer, line):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    path = _config(tmp_path, trainer)
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=cwd, hook=tmp_path / "hook")
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(path)!r}: {line}\n")
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize(("options", "line"), list(ON_COMMAND_LINE.values()), ids=list(ON_COMMAND_LINE))
def test_a_lightning_option_on_the_command_line_is_refused_before_torch(tmp_path, options, line):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch("fit", "--config", "tiny", *options, cwd=cwd, hook=tmp_path / "hook")
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("trainer", list(ACCEPTED.values()), ids=list(ACCEPTED))
def test_lightning_s_accepted_options_reach_the_live_parser(tmp_path, trainer):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    path = _config(tmp_path, trainer)
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=cwd, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr, proc.stderr
