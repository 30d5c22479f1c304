"""A ``class_path`` and Lightning's named ``trainer.*`` values refused before torch is imported
(issue 41: "a config error <= 3 s of CPU", measured by benchmarks/cli_startup.py, not timed here).

On 894fdde each of these was refused only by the live parser or the Trainer, after torch,
Lightning and transformers were imported (7-13 s of CPU from the wheel), often in jsonargparse's
wording with every name it knows and no close match. The child processes cannot import torch (a
``sitecustomize`` refuses it, :func:`tests.helpers.cli.lightning_fed_without_torch`): a refusal
that needed the imports would end in that import error instead. Each runs in an empty folder,
which stays empty. The second half shows that nothing Lightning or the package takes is refused:
every shipped config, the documented logger and callback forms, every exported class by its
short name and its path, and that a short name refused here is refused by Lightning's parser too
(its names and durations: tests/test_trainer_options.py, Hypothesis).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from huggingface_hub import constants

from lightning_fed.class_options import class_path_problem
from lightning_fed.class_paths import dotted_path_problem
from lightning_fed.config_values import option_problem, value_problem
from lightning_fed.shipped_configs import resolve_config_args
from lightning_fed.trainer_classes import EXPORTS, class_problem, known_classes, lightning_exports
from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "lightning_fed" / "configs"


def _fit(tmp_path: Path, *args: str, files: dict[str, str] | None = None):
    """``lightning-fed fit ARGS`` from ``tmp_path/cwd`` (with ``files`` written there), torch unimportable."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    for name, text in (files or {}).items():
        (cwd / name).write_text(text)
    return lightning_fed_without_torch("fit", *args, cwd=cwd, hook=tmp_path / "hook"), cwd


STRATEGY_FILE = "federation:\n  strategy:\n    class_path: FedAvgg\n"
HOOK_FILE = """federation:
  hooks:
    - class_path: lightning_fed.heterogeneity.ClientRanks
    - class_path: ClientGroupin
"""
CALLBACK_FILE = "trainer:\n  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpont\n"
OS_FILE = "data:\n  class_path: os.system\n"
DEVICES_FILE = "trainer:\n  devices: [0, x]\n"

OPTION_CASES = {
    "strategy_file": (
        ["--config", "tiny", "--config", "s.yaml"],
        {"s.yaml": STRATEGY_FILE},
        "config 's.yaml': federation.strategy: unknown class_path 'FedAvgg'; did you mean FedAvg?",
    ),
    "strategy_option": (
        ["--config", "tiny", "--federation.strategy=FedAdm"],
        {},
        "federation.strategy: unknown class_path 'FedAdm'; did you mean FedAdam?",
    ),
    "strategy_package_path": (
        ["--config", "tiny", "--federation.strategy=lightning_fed.strategies.FedProxx"],
        {},
        "federation.strategy: unknown class_path 'lightning_fed.strategies.FedProxx';"
        " did you mean lightning_fed.strategies.FedProx?",
    ),
    "hook_short_name_in_a_list": (
        ["--config", "tiny", "--config", "h.yaml"],
        {"h.yaml": HOOK_FILE},
        "config 'h.yaml': federation.hooks[1]: unknown class_path 'ClientGroupin'; did you mean ClientGrouping?",
    ),
    "hook_path_outside_the_hooks_package": (
        ["--config", "tiny", "--federation.hooks=[lightning_fed.heterogeneity.ClientRank]"],
        {},
        "federation.hooks[0]: class_path 'lightning_fed.heterogeneity.ClientRank': module"
        " 'lightning_fed.heterogeneity' has no class 'ClientRank';"
        " did you mean lightning_fed.heterogeneity.ClientRanks?",
    ),
    # red team 14 M9: a path into the package whose module does not exist was refused after torch, naming
    # no class ("module 'lightning_fed' has no attribute 'hooks'"); a hook outside round_hooks/ was
    # suggested at round_hooks/ (did you mean lightning_fed.round_hooks.RoundLRSchedule, itself). Seen
    # failing on 08c1cba: torch reached; the round_hooks/ path.
    "hook_path_into_no_module_in_a_file": (
        ["--config", "tiny", "--config", "q.yaml"],
        {"q.yaml": "federation:\n  hooks:\n    - class_path: lightning_fed.hooks.RoundLRSchedule\n"},
        "config 'q.yaml': federation.hooks[0]: class_path 'lightning_fed.hooks.RoundLRSchedule': no module named"
        " 'lightning_fed.hooks' is installed; did you mean lightning_fed.callbacks.RoundLRSchedule?",
    ),
    "hook_path_in_the_hooks_package_where_it_is_not": (
        ["--config", "tiny", "--federation.hooks=[lightning_fed.round_hooks.RoundLRSchedule]"],
        {},
        "federation.hooks[0]: unknown class_path 'lightning_fed.round_hooks.RoundLRSchedule';"
        " did you mean lightning_fed.callbacks.RoundLRSchedule?",
    ),
    "strategy_path_into_no_module": (
        ["--config", "tiny", "--federation.strategy=lightning_fed.strategy.FedAdam"],
        {},
        "federation.strategy: class_path 'lightning_fed.strategy.FedAdam': no module named 'lightning_fed.strategy'"
        " is installed; did you mean lightning_fed.strategies.FedAdam?",
    ),
    "logger_short_name": (
        ["--config", "tiny", "--trainer.logger=TensorBoardLoger"],
        {},
        "trainer.logger: unknown class_path 'TensorBoardLoger'; did you mean TensorBoardLogger?",
    ),
    "logger_path": (
        ["--config", "tiny", "--trainer.logger=lightning.pytorch.loggers.CSVLoger"],
        {},
        "trainer.logger: class_path 'lightning.pytorch.loggers.CSVLoger': module 'lightning.pytorch.loggers'"
        " has no class 'CSVLoger'; did you mean lightning.pytorch.loggers.CSVLogger?",
    ),
    "callback_short_name": (
        ["--config", "tiny", "--trainer.callbacks=ModelCheckpont"],
        {},
        "trainer.callbacks: unknown class_path 'ModelCheckpont'; did you mean ModelCheckpoint?",
    ),
    "callback_path_in_a_file": (
        ["--config", "tiny", "--config", "c.yaml"],
        {"c.yaml": CALLBACK_FILE},
        "config 'c.yaml': trainer.callbacks: class_path 'lightning.pytorch.callbacks.ModelCheckpont': module"
        " 'lightning.pytorch.callbacks' has no class 'ModelCheckpont'; did you mean"
        " lightning.pytorch.callbacks.ModelCheckpoint?",
    ),
    "callback_module_not_installed": (
        ["--config", "tiny", "--trainer.callbacks=nosuch_pkg_41.Callback"],
        {},
        "trainer.callbacks: class_path 'nosuch_pkg_41.Callback': no module named 'nosuch_pkg_41' is installed",
    ),
    "plugin_short_name": (
        ["--config", "tiny", "--trainer.plugins=SLURMEnvironmnt"],
        {},
        "trainer.plugins: unknown class_path 'SLURMEnvironmnt'; did you mean SLURMEnvironment?",
    ),
    "data_os_system_file": (
        ["--config", "tiny", "--config", "o.yaml"],
        {"o.yaml": OS_FILE},
        "config 'o.yaml': data: class_path 'os.system' is in Python's standard library, not a class the option takes",
    ),
    "data_os_system_option": (
        ["--config", "tiny", "--data.class_path=os.system"],
        {},
        "data: class_path 'os.system' is in Python's standard library, not a class the option takes",
    ),
    "model_a_function": (
        ["--config", "tiny", "--model.class_path=lightning_fed.errors.help_tip"],
        {},
        "model: class_path 'lightning_fed.errors.help_tip' is a function, not a class",
    ),
}
"""A class_path refused while the config is parsed: one line, exit 2 (no debug hint: not a value)."""

VALUE_CASES = {
    "devices_list_in_a_file": (
        ["--config", "tiny", "--config", "d.yaml"],
        {"d.yaml": DEVICES_FILE},
        "config 'd.yaml': trainer.devices must be a number of devices, -1, 'auto' or a list of device indices,"
        " got [0, 'x']",
    ),
    "gradient_clip_nan": (
        ["--config", "tiny", "--trainer.gradient_clip_val=nan"],
        {},
        "trainer.gradient_clip_val must be a finite number, got nan",
    ),
    "strategy_name": (
        ["--config", "tiny", "--trainer.strategy=ddpp"],
        {},
        "trainer.strategy 'ddpp' is not one of Lightning's strategy names; did you mean ddp?",
    ),
    "profiler_name": (
        ["--config", "tiny", "--trainer.profiler=nope"],
        {},
        "trainer.profiler 'nope' is not one of Lightning's profiler names; one of simple, advanced, pytorch, xla,"
        " or a Profiler's class_path",
    ),
    # issue 41 item 4: every dotted string is refused by Lightning as an invalid name, after 13-15 s of imports
    "strategy_dotted_no_class": (
        ["--config", "tiny", "--trainer.strategy=lightning.pytorch.strategies.NoSuch"],
        {},
        "trainer.strategy: class_path 'lightning.pytorch.strategies.NoSuch': module 'lightning.pytorch.strategies'"
        " has no class 'NoSuch'",
    ),
    "strategy_dotted_close_class": (
        ["--config", "tiny", "--trainer.strategy=lightning.pytorch.strategies.DDPStrategie"],
        {},
        "trainer.strategy: class_path 'lightning.pytorch.strategies.DDPStrategie': module"
        " 'lightning.pytorch.strategies' has no class 'DDPStrategie'; did you mean"
        " lightning.pytorch.strategies.DDPStrategy?",
    ),
    "strategy_dotted_no_module": (
        ["--config", "tiny", "--trainer.strategy=lightning.pytorch.nosuch.X"],
        {},
        "trainer.strategy: class_path 'lightning.pytorch.nosuch.X': no module named 'lightning.pytorch.nosuch'"
        " is installed",
    ),
    "strategy_dotted_close_module": (
        ["--config", "tiny", "--trainer.strategy=lightning.pytorch.strategy.DDPStrategy"],
        {},
        "trainer.strategy: class_path 'lightning.pytorch.strategy.DDPStrategy': no module named"
        " 'lightning.pytorch.strategy' is installed; did you mean lightning.pytorch.strategies.DDPStrategy?",
    ),
    "strategy_class_as_a_name": (
        ["--config", "tiny", "--config", "s.yaml"],
        {"s.yaml": "trainer:\n  strategy: lightning.pytorch.strategies.DDPStrategy\n"},
        "config 's.yaml': trainer.strategy 'lightning.pytorch.strategies.DDPStrategy' is a class path given as a"
        " name: Lightning"
        " takes a string only as one of its strategy names; give the class as"
        " {class_path: lightning.pytorch.strategies.DDPStrategy}",
    ),
    "strategy_name_with_a_dot": (
        ["--config", "tiny", "--trainer.strategy=ddp.spawn"],
        {},
        "trainer.strategy 'ddp.spawn' is not one of Lightning's strategy names; did you mean ddp_spawn?",
    ),
    "profiler_dotted_close_class": (
        ["--config", "tiny", "--trainer.profiler=lightning.pytorch.profilers.SimpleProfilr"],
        {},
        "trainer.profiler: class_path 'lightning.pytorch.profilers.SimpleProfilr': module"
        " 'lightning.pytorch.profilers' has no class 'SimpleProfilr'; did you mean"
        " lightning.pytorch.profilers.SimpleProfiler?",
    ),
    "max_time": (
        ["--config", "tiny", "--trainer.max_time=abc"],
        {},
        "trainer.max_time must be a duration DD:HH:MM:SS (e.g. 00:12:00:00) or a mapping such as {hours: 12},"
        " got 'abc'",
    ),
    "val_check_interval": (
        ["--config", "tiny", "--trainer.val_check_interval=abc"],
        {},
        "trainer.val_check_interval must be a fraction of the epoch, a number of batches or a duration"
        " DD:HH:MM:SS, got 'abc'",
    ),
}
"""A value refused before torch, from the config's text: one line (the file named when it set it)."""


@pytest.mark.parametrize(("args", "files", "line"), list(OPTION_CASES.values()), ids=list(OPTION_CASES))
def test_a_class_path_that_names_no_class_is_one_line_before_torch(tmp_path, args, files, line):
    proc, cwd = _fit(tmp_path, *args, files=files)
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert sorted(p.name for p in cwd.iterdir()) == sorted(files)


@pytest.mark.parametrize(("args", "files", "line"), list(VALUE_CASES.values()), ids=list(VALUE_CASES))
def test_a_trainer_value_lightning_refuses_is_one_line_before_torch(tmp_path, args, files, line):
    proc, cwd = _fit(tmp_path, *args, files=files)
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert sorted(p.name for p in cwd.iterdir()) == sorted(files)


# ------------------------------------------------------------------------------- nothing valid refused
#: A data row with every field a shipped config's data section reads (``runs/real_text/data/*.jsonl``, written
#: by ``benchmarks/real_text/build_data.py``, is not in the repository).
ROW = {"user": "u0", "prompt": "p", "chosen": "a", "rejected": "b", "instruction": "i", "input": "", "output": "o"}
USERS = 8
"""Users in such a file (the shipped ``real_text_*`` configs make 4 clients by ``user``)."""


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS.glob("*.yaml")))
def test_every_shipped_config_passes(name, tmp_path, monkeypatch):
    """From a folder holding the data files a config names (the repository's ``examples/``, and those
    its documented step writes, ``runs/...``: ``benchmarks/real_text/build_data.py`` for
    ``real_text_*``): the precheck refuses a ``data.dataset`` path to nothing
    (lightning_fed/data_paths.py), as the data module did after the imports. Online: a config's hub id
    (``distilgpt2``, ``Qwen/Qwen2-0.5B``) is fetched then; offline, one not in the hub cache is refused
    (lightning_fed/model_sources.py), as the model loader would refuse it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    text = (CONFIGS / f"{name}.yaml").read_text(encoding="utf-8")
    for given in re.findall(r"^\s*\w*dataset: ((?:runs|examples)/\S+)$", text, re.M):
        (tmp_path / given).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / given).is_file():  # the repository's examples/
            shutil.copy(ROOT / given, tmp_path / given)
        else:  # the precheck reads the rows (lightning_fed/data_files.py): rows of every field a config reads,
            # one per user of USERS (ByKey on `user` makes a client of each: no fewer than data.num_clients)
            rows = [{**ROW, "user": f"u{i}"} for i in range(USERS)]
            (tmp_path / given).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    args = resolve_config_args(["--config", name])
    assert (option_problem(args), value_problem(args)) == (None, None)


DOCUMENTED = [
    "--trainer.logger=true",
    "--trainer.logger=false",
    "--trainer.logger=CSVLogger",
    "--trainer.logger=TensorBoardLogger",
    "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
    "--trainer.logger={class_path: lightning.pytorch.loggers.TensorBoardLogger, init_args: {save_dir: runs}}",
    "--trainer.callbacks=ModelCheckpoint",
    "--trainer.callbacks=[EarlyStopping, LearningRateMonitor]",
    "--trainer.callbacks=lightning.pytorch.callbacks.ModelCheckpoint",
    "--trainer.callbacks=[{class_path: lightning.pytorch.callbacks.EarlyStopping, init_args: {monitor: loss}}]",
    "--trainer.plugins=SLURMEnvironment",
    "--trainer.strategy=DDP",
    "--trainer.strategy=auto",
    "--trainer.strategy={class_path: lightning.pytorch.strategies.DDPStrategy}",
    "--trainer.profiler=simple",
    "--trainer.profiler={class_path: lightning.pytorch.profilers.SimpleProfiler}",
    "--trainer.max_time=00:12:00:00",
    "--trainer.max_time={hours: 12}",
    "--trainer.val_check_interval=1.0",
    "--trainer.devices=2",
    "--federation.strategy=FedAdam",
    "--federation.strategy=lightning_fed.strategies.fedprox.FedProx",
    # a hook by its short name and one by its path outside round_hooks/ (ClientRanks was here: with tiny's
    # FedAvg it is now refused before torch, lightning_fed/hook_cross_rules.py)
    "--federation.hooks=[RoundLRSchedule, lightning_fed.heterogeneity.SystemHeterogeneity]",
    "--model.class_path=lightning_fed.modules.DPOModule",
]


@pytest.mark.parametrize("option", DOCUMENTED)
def test_the_documented_forms_pass(option):
    args = resolve_config_args(["--config", "tiny", option])
    assert (option_problem(args), value_problem(args)) == (None, None)


def test_a_user_s_own_class_passes(tmp_path, monkeypatch):
    """``my_pkg.MyModule`` on the path (docs/developer/adding-a-method.md) is the user's: not refused."""
    (tmp_path / "my_pkg_41").mkdir()
    (tmp_path / "my_pkg_41" / "__init__.py").write_text("from my_pkg_41.mod import MyModule\n")
    (tmp_path / "my_pkg_41" / "mod.py").write_text("class MyModule:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for path in ("my_pkg_41.MyModule", "my_pkg_41.mod.MyModule"):
        assert class_path_problem("model", {"class_path": path, "init_args": {}}) is None
    assert dotted_path_problem("model", "my_pkg_41.mod.MyModul") == (
        "model: class_path 'my_pkg_41.mod.MyModul': module 'my_pkg_41.mod' has no class 'MyModul'; did you mean"
        " my_pkg_41.mod.MyModule?"
    )


@pytest.mark.parametrize("option", sorted(EXPORTS))
def test_every_class_lightning_exports_passes_by_name_and_path(option):
    """Each class Lightning's subpackage exports, by short name and by its dotted path, as imported."""
    import importlib

    for parts in EXPORTS[option]:
        module = importlib.import_module(".".join(("lightning", *parts)))
        names = lightning_exports(*parts)
        assert names and set(names) <= set(dir(module))
        for name in names:
            if isinstance(getattr(module, name), type):
                assert class_problem(option, name) is None
                assert class_problem(option, {"class_path": f"{module.__name__}.{name}"}) is None


# ------------------------------------------------------------------------------- Lightning refuses too
def test_a_refused_short_name_is_refused_by_lightning_s_parser():
    """jsonargparse resolves a short name among the imported subclasses of the option's type: the
    names refused here are refused by the LightningCLI's parser of ``trainer:`` too."""
    from jsonargparse import ArgumentError
    from lightning.pytorch import Trainer
    from lightning.pytorch.cli import LightningArgumentParser

    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_lightning_class_args(Trainer, "trainer")
    for option, word in [("callbacks", "ModelCheckpont"), ("logger", "CSVLoger"), ("plugins", "foo")]:
        assert class_problem(option, word) is not None
        with pytest.raises(ArgumentError):
            parser.parse_args([f"--trainer.{option}={word}"])
    for option in ("callbacks", "logger", "plugins"):
        assert known_classes(option)


def test_one_callback_not_in_a_list_is_taken_as_the_trainer_takes_it(tmp_path: Path):
    """``--trainer.callbacks=LearningRateMonitor`` (one callback, not a list: the Trainer takes
    either) trains; it was a ``TypeError: 'LearningRateMonitor' object is not iterable`` (exit 1)."""
    from tests.helpers.cli import lightning_fed

    run = tmp_path / "run"
    proc = lightning_fed(
        "fit", "--config", "tiny", "--federation.rounds=1", "--trainer.callbacks=LearningRateMonitor",
        f"--trainer.default_root_dir={run}", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list(run.rglob("last.ckpt"))
