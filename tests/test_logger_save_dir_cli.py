"""A logger's ``save_dir`` where no file can be written is refused before torch in one line naming
``trainer.logger.init_args.save_dir``, as ``trainer.default_root_dir`` is (red team 17 B21).

On 75a286d ``fit`` with ``trainer.logger: {class_path: ...TensorBoardLogger, init_args: {save_dir: <a file>,
name: feddpo}}`` (CSVLogger alike) exited 2 after torch with ``error: NotADirectoryError: [Errno 20] Not a
directory: '<file>/feddpo'`` and the ``--debug`` hint, naming no option. The children cannot import torch
(tests/helpers/cli.py); each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch
from tests.helpers.refusals import assert_refused_before_torch, shipped_config, write_config

LOGGERS = "lightning.pytorch.loggers."


def _logger(name: str, save_dir: Path) -> dict:
    return {"class_path": LOGGERS + name, "init_args": {"save_dir": str(save_dir), "name": "feddpo"}}


@pytest.mark.parametrize("name", ["TensorBoardLogger", "CSVLogger"])
@pytest.mark.parametrize("listed", [False, True])
def test_a_logger_save_dir_that_is_a_file_is_refused_naming_it_before_torch(tmp_path, name, listed):
    a_file = tmp_path / "rootfile"
    a_file.write_text("x")
    config = shipped_config("tiny")
    logger = _logger(name, a_file)
    config["trainer"]["logger"] = [logger] if listed else logger
    path = write_config(tmp_path, config)
    option = "trainer.logger[0]" if listed else "trainer.logger"
    line = f"{option}.init_args.save_dir '{a_file}': '{a_file}' is a file, not a folder"
    assert_refused_before_torch(tmp_path, ["fit", "--config", str(path)], line, config_file=path)
    assert a_file.read_text() == "x"


def test_the_shipped_logger_s_save_dir_given_on_the_command_line_is_named(tmp_path):
    """``demo`` sets a TensorBoardLogger's ``save_dir``: the folder users edit."""
    a_file = tmp_path / "rootfile"
    a_file.write_text("x")
    args = ["fit", "--config", "demo", f"--trainer.logger.init_args.save_dir={a_file}"]
    line = f"trainer.logger.init_args.save_dir '{a_file}': '{a_file}' is a file, not a folder"
    assert_refused_before_torch(tmp_path, args, line)


def test_a_logger_save_dir_that_can_be_made_is_not_refused(tmp_path):
    config = shipped_config("tiny")
    config["trainer"]["logger"] = _logger("CSVLogger", tmp_path / "logs" / "new")
    path = write_config(tmp_path, config)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=cwd, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr
