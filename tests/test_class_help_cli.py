"""``--<option>.help CLASS`` asking about a class that is none, refused before torch in one line naming
the option and the closest class (lightning_fed/class_help.py).

On f6ad729 ``fit --federation.hooks.help lightning_fed.hooks.RoundLRSchedule`` was refused after torch
(8.4 s of CPU) with jsonargparse's wording and a tip line, naming no class (``error:
--federation.hooks.help: module 'lightning_fed' has no attribute 'hooks'``; red team 15 L2). The
child processes cannot import torch (:func:`tests.helpers.cli.lightning_fed_without_torch`): a help
request left to the live parser ends in that import error, which the last test expects.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed, lightning_fed_without_torch

HOOKS = (
    "AsyncArrivals, CentralizedCoreset, ClientGrouping, ClientRanks, CoresetSelection, EmulatorAlignment,"
    " FLoRAMerge, GlobalSelect, HeldOutRouge, HierarchicalDataSelection, PerplexitySelection, RandomSelection,"
    " RoundLRSchedule, ServerSideCoreset, SystemHeterogeneity"
)

CASES = {
    "hook_at_no_module": (
        ["--federation.hooks.help", "lightning_fed.hooks.RoundLRSchedule"],
        "--federation.hooks.help: class_path 'lightning_fed.hooks.RoundLRSchedule': no module named"
        " 'lightning_fed.hooks' is installed; did you mean lightning_fed.callbacks.RoundLRSchedule?",
    ),
    "no_such_hook": (
        ["--federation.hooks.help", "NoSuchHook"],
        f"--federation.hooks.help: unknown class_path 'NoSuchHook'; the package's: {HOOKS}",
    ),
    "hook_name_misspelt": (
        ["--federation.hooks.help=RoundLRSchedul"],
        "--federation.hooks.help: unknown class_path 'RoundLRSchedul'; did you mean RoundLRSchedule?",
    ),
    "callback_at_a_misspelt_module": (
        ["--trainer.callbacks.help", "lightning.pytorch.callback.ModelCheckpoint"],
        "--trainer.callbacks.help: class_path 'lightning.pytorch.callback.ModelCheckpoint': no module named"
        " 'lightning.pytorch.callback' is installed; did you mean lightning.pytorch.callbacks.ModelCheckpoint?",
    ),
}
"""``fit --config tiny ARGS`` -> the one line it is refused with."""


@pytest.mark.parametrize(("args", "line"), list(CASES.values()), ids=list(CASES))
def test_help_for_no_class_is_one_line_naming_the_closest_before_torch(tmp_path: Path, args, line):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch("fit", "--config", "tiny", *args, cwd=cwd, hook=tmp_path / "hook")
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, f"error: {line}\n", "")
    assert list(cwd.iterdir()) == []


NESTED_CASES = {
    "partition_name_misspelt": (
        ["--data.partition.help", "ByKe"],
        "--data.partition.help: unknown class_path 'ByKe'; did you mean ByKey?",
    ),
    "partition_under_init_args": (
        ["--config", "tiny", "--data.init_args.partition.help=Dirichle"],
        "--data.init_args.partition.help: unknown class_path 'Dirichle'; did you mean Dirichlet?",
    ),
    "partition_at_the_package": (
        ["--data.partition.help", "lightning_fed.datamodules.ByKy"],
        "--data.partition.help: class_path 'lightning_fed.datamodules.ByKy': module 'lightning_fed.datamodules'"
        " has no class 'ByKy'; did you mean lightning_fed.datamodules.ByKey?",
    ),
    "wrapped_strategy_misspelt": (
        ["--config", "feddpo_dp", "--federation.strategy.strategy.help", "FedAdm"],
        "--federation.strategy.strategy.help: unknown class_path 'FedAdm'; did you mean FedAdam?",
    ),
}
"""``fit ARGS`` asking about the class of an option inside a class (a partitioner of ``data``, the
strategy a wrapper wraps) -> the one line it is refused with. On 400fdb1 each went to the live parser
(~20 s of CPU), which blamed the data module (``error: data: unknown class_path
'lightning_fed.datamodules.FederatedDataModule' (--partition.help: Expected a dot import path string:
ByKe)``) or the wrapper, named no class and added a tip line (red team 16 B5)."""


@pytest.mark.parametrize(("args", "line"), list(NESTED_CASES.values()), ids=list(NESTED_CASES))
def test_help_for_no_class_inside_a_class_names_the_full_option_before_torch(tmp_path: Path, args, line):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch("fit", *args, cwd=cwd, hook=tmp_path / "hook")
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, f"error: {line}\n", "")
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--data.partition.help", "ByKey"],
        ["--data.partition.help=lightning_fed.datamodules.Dirichlet"],
        ["--config", "feddpo_dp", "--federation.strategy.strategy.help", "FedAdam"],
        ["--federation.hooks.help", "RoundLRSchedule"],
        ["--federation.hooks.help=lightning_fed.callbacks.RoundLRSchedule"],
        ["--trainer.callbacks.help", "ModelCheckpoint"],
        ["--federation.strategy.help", "FedAvg"],
        ["--model.help"],
    ],
)
def test_help_for_a_real_class_is_left_to_the_parser(tmp_path: Path, args):
    proc = lightning_fed_without_torch("fit", *args, cwd=tmp_path, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr


PAGES = {
    "hook": (
        ["--federation.hooks.help", "RoundLRSchedule"],
        "usage: lightning-fed fit [--federation.hooks.schedule SCHEDULE]",
        "Help for --federation.hooks.help=lightning_fed.callbacks.RoundLRSchedule",
    ),
    "partitioner": (
        ["--data.partition.help", "ByKey"],
        "usage: lightning-fed fit --data.partition.key KEY",
        "Help for --data.partition.help=lightning_fed.datamodules.ByKey",
    ),
    "wrapped_strategy": (
        ["--config", "feddpo_dp", "--federation.strategy.strategy.help", "FedAdam"],
        "usage: lightning-fed fit [--federation.strategy.strategy.server_lr SERVER_LR]",
        "Help for --federation.strategy.strategy.help=lightning_fed.strategies.FedAdam",
    ),
}
"""``fit ARGS`` -> the first line of the page it prints and the line that says what the page is."""


@pytest.mark.parametrize(("args", "usage", "title"), list(PAGES.values()), ids=list(PAGES))
def test_a_class_s_help_page_names_the_subcommand_and_the_full_option(tmp_path: Path, args, usage, title):
    """The page's usage line on f6ad729 was ``usage: lightning-fed [--federation.hooks.schedule ...`` (the
    script's name alone: ``__main__.py`` under ``python -m``; red team 15 L9). On 400fdb1 a class inside
    a class still printed ``usage: cli.py --partition.key KEY`` / ``usage: cli.py [--strategy.server_lr
    SERVER_LR]`` and ``Help for --partition.help=...`` (red team 16 B6). Imports torch (the live parser
    prints the page): ~8 s of CPU each."""
    proc = lightning_fed("fit", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == usage
    assert title in proc.stdout.splitlines()
