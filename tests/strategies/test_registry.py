"""The strategy registry: a user's own strategy is selectable by its short name."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_fed.cli import main
from lightning_fed.strategies import available_strategies, load_strategy_plugins

ROOT = Path(__file__).parents[2]

PLUGIN = '''
from lightning_fed.strategies import FedAvg


class {name}(FedAvg):
    """FedAvg that says when it aggregates."""

    def aggregate(self, global_state, updates):
        print(f"{name} aggregated {{len(updates)}} updates", flush=True)
        return super().aggregate(global_state, updates)
'''


def plugin_package(root: Path, module: str, cls: str, entry_point: str | None = None) -> Path:
    """``module.py`` defining ``cls``, and with ``entry_point`` a dist-info advertising it, as pip would install it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(PLUGIN.format(name=cls))
    if entry_point is not None:
        info = root / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[lightning_fed.strategies]\n{module} = {entry_point}\n")
    return root


def test_installed_plugin_strategy_runs_by_short_name(tmp_path):
    """An entry point makes the CLI import the plugin; ``--federation.strategy=LoudAvg`` then resolves and runs."""
    site = plugin_package(tmp_path / "site", "my_fed_plugin", "LoudAvg", entry_point="my_fed_plugin")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
    }
    args = ["fit", "--config", "configs/tiny.yaml", "--federation.strategy=LoudAvg", "--federation.rounds=1"]
    args += ["--federation.local_steps=1", f"--trainer.default_root_dir={tmp_path / 'run'}"]
    args += ["--trainer.enable_progress_bar=false"]
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "LoudAvg aggregated 2 updates" in proc.stdout
    (run,) = (tmp_path / "run" / "lightning_logs").iterdir()
    assert "class_path: my_fed_plugin.LoudAvg" in (run / "config.yaml").read_text()


def test_full_path_once_then_short_name(tmp_path, monkeypatch, capsys):
    """Without an entry point the short name is unknown until the module is imported (e.g. by its full path)."""
    monkeypatch.syspath_prepend(str(plugin_package(tmp_path, "my_local_strategies", "HalfwayAvg")))
    assert "HalfwayAvg" not in available_strategies()
    base = ["fit", "--config", "configs/tiny.yaml", "--print_config"]
    with pytest.raises(SystemExit) as unknown:
        main([*base, "--federation.strategy=HalfwayAvg"])
    err = capsys.readouterr().err
    assert unknown.value.code == 2, err
    assert "error: federation.strategy: no strategy named 'HalfwayAvg'; by short name: " in err
    listed = err.split("by short name: ", 1)[1].split("; or give a full class path", 1)[0].split(", ")
    assert listed == sorted(listed) and {"FedAvg", "FedNova", "Scaffold", "TrimmedMean"} <= set(listed)
    for value in ("my_local_strategies.HalfwayAvg", "HalfwayAvg"):  # full path imports it; then the name
        with pytest.raises(SystemExit) as ok:
            main([*base, f"--federation.strategy={value}"])
        assert ok.value.code == 0
        assert "class_path: my_local_strategies.HalfwayAvg\n" in capsys.readouterr().out
    assert available_strategies()["HalfwayAvg"] == ["my_local_strategies.HalfwayAvg"]


def test_broken_plugin_is_named(tmp_path, monkeypatch):
    site = plugin_package(tmp_path, "my_broken_plugin", "Unused", entry_point="my_broken_plugin.nowhere")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ImportError, match=r"strategy plugin my_broken_plugin = 'my_broken_plugin.nowhere' .*failed"):
        load_strategy_plugins()


def test_registry_skips_abstract_and_local_classes():
    from lightning_fed.strategies import FedAvg, FedOpt

    class LocalAvg(FedAvg):
        pass

    names = available_strategies()
    assert "FedOpt" not in names and FedOpt.__abstractmethods__  # abstract: not a choice
    assert "LocalAvg" not in names and LocalAvg.__qualname__.endswith("<locals>.LocalAvg")
    assert names["FedAvg"] == ["lightning_fed.strategies.FedAvg"]


def test_user_strategy_and_objective_from_a_test_module_by_short_name(tmp_path):
    """One installed entry point per group: ``lightning_fed.strategies`` -> ``tests/strategies/plugin_objects.py``,
    ``lightning_fed.modules`` -> ``tests/modules/plugin_objective.py``. The CLI finds both classes by short
    name (neither module is imported otherwise), the strategy's own
    ``weights()`` decides the average, and the saved config names the full paths."""
    site = tmp_path / "site"
    info = site / "test_plugins-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: test-plugins\nVersion: 0.1\n")
    strategies, objectives = "tests.strategies.plugin_objects", "tests.modules.plugin_objective"
    (info / "entry_points.txt").write_text(
        f"[lightning_fed.strategies]\nmine = {strategies}\n\n[lightning_fed.modules]\nmine = {objectives}\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
    }
    args = ["fit", "--config", "configs/fedsimpo.yaml", "--model=AnnouncedSimPO", "--model.gamma=0.5"]
    args += ["--federation.strategy=ClientIdWeightedAvg", "--federation.rounds=1", "--federation.local_steps=1"]
    args += [f"--trainer.default_root_dir={tmp_path / 'run'}", "--trainer.enable_progress_bar=false"]
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "AnnouncedSimPO built, gamma=0.5" in proc.stdout
    (line,) = [s for s in proc.stdout.splitlines() if s.startswith("ClientIdWeightedAvg weights")]
    weights = ast.literal_eval(line.split("weights ", 1)[1])  # two sampled clients of four, weighted by id + 1
    assert len(weights) == 2 and set(weights) <= {1.0, 2.0, 3.0, 4.0}, line
    (run,) = (tmp_path / "run" / "lightning_logs").iterdir()
    saved = (run / "config.yaml").read_text()
    assert f"class_path: {objectives}.AnnouncedSimPO" in saved
    assert f"class_path: {strategies}.ClientIdWeightedAvg" in saved


def test_objectives_are_listed_by_short_name():
    from lightning_fed.modules.registry import available_modules

    names = available_modules()
    assert names["SimPOModule"] == ["lightning_fed.modules.SimPOModule"]
    assert {"DPOModule", "ORPOModule", "PDPOModule", "SFTModule"} <= set(names)


def test_broken_objective_plugin_is_named(tmp_path, monkeypatch):
    from lightning_fed.modules.registry import load_module_plugins

    info = tmp_path / "my_broken_objectives-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my_broken_objectives\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[lightning_fed.modules]\nbroken = my_broken_objectives.nowhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ImportError, match=r"^module plugin broken = 'my_broken_objectives.nowhere' \(entry point group"
    ):
        load_module_plugins()


def test_objective_short_name_is_unknown_until_its_entry_point_is_installed(tmp_path, monkeypatch, capsys):
    from lightning_fed.modules.registry import available_modules

    base = ["fit", "--config", "configs/fedsimpo.yaml", "--print_config", "--model=AnnouncedSimPO"]
    assert "AnnouncedSimPO" not in available_modules()
    with pytest.raises(SystemExit) as unknown:
        main(base)
    err = capsys.readouterr().err
    assert unknown.value.code == 2, err
    assert err.startswith("error: model: no objective named 'AnnouncedSimPO'; by short name: "), err
    listed = err.split("by short name: ", 1)[1].split("; or give a full class path\n", 1)[0].split(", ")
    assert listed == sorted(listed) and {"DPOModule", "ORPOModule", "PDPOModule", "SimPOModule"} <= set(listed)
    info = tmp_path / "objectives-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: objectives\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[lightning_fed.modules]\nmine = tests.modules.plugin_objective\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as ok:
        main(base)
    assert ok.value.code == 0
    assert "class_path: tests.modules.plugin_objective.AnnouncedSimPO\n" in capsys.readouterr().out
    assert available_modules()["AnnouncedSimPO"] == ["tests.modules.plugin_objective.AnnouncedSimPO"]
