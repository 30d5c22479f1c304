"""A refusal made before torch is imported, as the CLI tests assert it: exit code 2, one exact stderr
line, and a working folder that holds nothing new. The child cannot import torch
(:func:`tests.helpers.cli.lightning_fed_without_torch`): a refusal that still needed the live parser
ends in that import error (:data:`~tests.helpers.cli.REACHED_TORCH`) instead.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lightning_fed.shipped_configs import resolve_config
from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch


def shipped_config(name: str) -> dict:
    """A fresh copy of the shipped config ``name`` (``tiny``, ``feddpo_dp``, ...), to mutate."""
    return yaml.safe_load(Path(resolve_config(name)).read_text(encoding="utf-8"))


def write_config(tmp_path: Path, config: dict, name: str = "run.yaml") -> Path:
    """``config`` as YAML in ``tmp_path / name``."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def assert_refused_before_torch(tmp_path: Path, args: list[str], line: str, *, config_file: Path | None = None):
    """``lightning-fed ARGS`` from an empty folder ``tmp_path / "cwd"``, torch unimportable: exit code 2,
    stderr exactly ``error: LINE`` (``error: config 'CONFIG_FILE': LINE`` when the line names the file
    that set the value), and the folder still empty. Returns the finished process."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch(*args, cwd=cwd, hook=tmp_path / "hook")
    where = "" if config_file is None else f"config {str(config_file)!r}: "
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (2, f"error: {where}{line}\n")
    assert list(cwd.iterdir()) == []
    return proc


def assert_config_refused_before_torch(
    tmp_path: Path, config: dict, line: str, *args: str, name: str = "run.yaml"
) -> Path:
    """``config`` written to ``tmp_path / name`` (:func:`write_config`) and refused by
    ``lightning-fed fit --config FILE ARGS`` in one line naming that file
    (:func:`assert_refused_before_torch`). Returns the file's path."""
    path = write_config(tmp_path, config, name)
    assert_refused_before_torch(tmp_path, ["fit", "--config", str(path), *args], line, config_file=path)
    return path
