"""A ``class_path`` at a module that does not exist, or at one that does not hold the class, refused
before torch naming the real class closest to it, found in its package's source
(:func:`lightning_fed.class_locations.closest_class`).

On f6ad729 a misspelt module inside Lightning (``lightning.pytorch.callback.ModelCheckpoint``) was
left to the live parser, since ``lightning.pytorch.callback`` might have been a class holding a
class: refused after torch (6 s of CPU) in two lines, naming no class (red team 15 M7). A path into
the package at the wrong module (``lightning_fed.hooks.round_lr.RoundLRSchedule``) was refused
early but named no class (L2). The child processes cannot import torch
(:func:`tests.helpers.cli.lightning_fed_without_torch`); each runs in an empty folder, which stays
empty but for the files the case writes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lightning_fed.class_locations import closest_class
from lightning_fed.class_paths import dotted_path_problem
from lightning_fed.trainer_classes import lightning_exports
from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

HOOK_INIT_ARGS = "init_args: {schedule: cosine, min_lr: 1.0e-6}"
LOGGER_FILE = """trainer:
  logger:
    class_path: lightning.pytorch.logger.CSVLogger
    init_args: {save_dir: logs}
"""

CASES = {
    "lightning_callback_module": (
        ["--trainer.callbacks=[{class_path: lightning.pytorch.callback.ModelCheckpoint}]"],
        {},
        "trainer.callbacks: class_path 'lightning.pytorch.callback.ModelCheckpoint': no module named"
        " 'lightning.pytorch.callback' is installed; did you mean lightning.pytorch.callbacks.ModelCheckpoint?",
    ),
    "lightning_logger_module": (
        ["--trainer.logger={class_path: lightning.pytorch.logger.TensorBoardLogger}"],
        {},
        "trainer.logger: class_path 'lightning.pytorch.logger.TensorBoardLogger': no module named"
        " 'lightning.pytorch.logger' is installed; did you mean lightning.pytorch.loggers.TensorBoardLogger?",
    ),
    "pytorch_lightning_callback_module": (
        ["--trainer.callbacks=[{class_path: pytorch_lightning.callback.ModelCheckpoint}]"],
        {},
        "trainer.callbacks: class_path 'pytorch_lightning.callback.ModelCheckpoint': no module named"
        " 'pytorch_lightning.callback' is installed; did you mean pytorch_lightning.callbacks.ModelCheckpoint?",
    ),
    "lightning_plugin_module": (
        ["--trainer.plugins=[{class_path: lightning.pytorch.plugin.SLURMEnvironment}]"],
        {},
        "trainer.plugins: class_path 'lightning.pytorch.plugin.SLURMEnvironment': no module named"
        " 'lightning.pytorch.plugin' is installed; did you mean"
        " lightning.pytorch.plugins.environments.SLURMEnvironment?",
    ),
    "lightning_logger_module_in_a_file": (
        ["--config", "l.yaml"],
        {"l.yaml": LOGGER_FILE},
        "config 'l.yaml': trainer.logger: class_path 'lightning.pytorch.logger.CSVLogger': no module named"
        " 'lightning.pytorch.logger' is installed; did you mean lightning.pytorch.loggers.CSVLogger?",
    ),
    "hook_at_the_package_top": (
        [f"--federation.hooks=[{{class_path: lightning_fed.RoundLRSchedule, {HOOK_INIT_ARGS}}}]"],
        {},
        "federation.hooks[0]: class_path 'lightning_fed.RoundLRSchedule': module 'lightning_fed' has no class"
        " 'RoundLRSchedule'; did you mean lightning_fed.callbacks.RoundLRSchedule?",
    ),
    "hook_in_the_strategies": (
        [f"--federation.hooks=[{{class_path: lightning_fed.strategies.RoundLRSchedule, {HOOK_INIT_ARGS}}}]"],
        {},
        "federation.hooks[0]: class_path 'lightning_fed.strategies.RoundLRSchedule': module 'lightning_fed.strategies'"
        " has no class 'RoundLRSchedule'; did you mean lightning_fed.callbacks.RoundLRSchedule?",
    ),
    "hook_at_a_module_that_does_not_exist": (
        [f"--federation.hooks=[{{class_path: lightning_fed.hooks.round_lr.RoundLRSchedule, {HOOK_INIT_ARGS}}}]"],
        {},
        "federation.hooks[0]: class_path 'lightning_fed.hooks.round_lr.RoundLRSchedule': no module named"
        " 'lightning_fed.hooks.round_lr' is installed; did you mean lightning_fed.callbacks.RoundLRSchedule?",
    ),
}
"""``fit --config tiny ARGS`` (with FILES written) -> the one line it is refused with."""


def lightning_root() -> Path:
    """The installed ``lightning`` folder (found, not imported)."""
    spec = importlib.util.find_spec("lightning")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


@pytest.mark.parametrize(("args", "files", "line"), list(CASES.values()), ids=list(CASES))
def test_a_class_path_at_the_wrong_module_names_the_closest_class_before_torch(tmp_path: Path, args, files, line):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for name, text in files.items():
        (cwd / name).write_text(text)
    proc = lightning_fed_without_torch("fit", "--config", "tiny", *args, cwd=cwd, hook=tmp_path / "hook")
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert sorted(p.name for p in cwd.iterdir()) == sorted(files)


@pytest.mark.parametrize(
    ("class_path", "closest"),
    [
        ("lightning_fed.strategy.FedAvg", "lightning_fed.strategies.FedAvg"),
        ("lightning_fed.hooks.RoundLRSchedul", "lightning_fed.callbacks.RoundLRSchedule"),  # both misspelt
        ("lightning.pytorch.callback.NoSuchCallback", None),  # no class close to it anywhere
        ("no_such_package.mod.Class", None),
    ],
)
def test_closest_class_is_a_real_class_of_the_same_package(class_path: str, closest: str | None):
    assert closest_class(class_path) == closest


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_lightning_class_at_a_misspelt_subpackage_names_the_class_where_it_is(data):
    """Any class Lightning's callbacks or loggers export, its subpackage's name with one letter dropped,
    doubled or swapped for another: refused naming the class at its exported path (found in the
    source, no import), never left to the parser or sent to another class."""
    subpackage = data.draw(st.sampled_from(["callbacks", "loggers"]))
    name = data.draw(st.sampled_from([n for n in lightning_exports("pytorch", subpackage) or () if n[:1].isupper()]))
    i = data.draw(st.integers(0, len(subpackage) - 1))
    letter = data.draw(st.sampled_from("abcdefghijklmnopqrstuvwxyz"))
    misspelt = data.draw(
        st.sampled_from([subpackage[:i] + subpackage[i + 1 :], subpackage[:i] + letter + subpackage[i:]])
    )
    assume(misspelt != subpackage and misspelt.isidentifier())
    assume(not any(Path(lightning_root(), "pytorch", misspelt + suffix).exists() for suffix in ("", ".py")))
    line = dotted_path_problem("trainer.callbacks", f"lightning.pytorch.{misspelt}.{name}")
    assert line is not None
    assert line.endswith(f"; did you mean lightning.pytorch.{subpackage}.{name}?")
