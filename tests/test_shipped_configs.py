"""The configs shipped in the package: the catalog, ``--config NAME``, ``lightning-fed configs``, the wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from lightning_fed.errors import UserError, help_tip
from lightning_fed.shipped_configs import CONFIG_DIR, catalog, resolve_config, resolve_config_args, shipped_configs
from tests.packaging.wheel import build_wheel

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)


def _cli(args: list[str], cwd: Path = ROOT, python: str = sys.executable, **env: str) -> subprocess.CompletedProcess:
    env = {**ENV, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [python, "-m", "lightning_fed.cli", *args], cwd=cwd, env=env, text=True, capture_output=True, timeout=600
    )


def test_the_repository_configs_folder_is_the_package_one():
    # configs/ is a link kept for existing commands (`--config configs/demo.yaml`) and scripts
    assert (ROOT / "configs").is_symlink() and (ROOT / "configs").resolve() == CONFIG_DIR
    assert os.readlink(ROOT / "configs") == "lightning_fed/configs"  # relative: works in any clone


def test_every_shipped_config_has_one_catalog_row_with_every_field():
    rows = catalog()
    assert sorted(rows) == sorted(shipped_configs())
    for name, row in rows.items():
        assert all(row[k].strip() for k in ("method", "paper", "description")), name
        assert "\n" not in row["description"] and len(row["description"]) < 120, name


def test_a_shipped_name_resolves_to_its_file_and_anything_else_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_config("feddpo") == str(CONFIG_DIR / "feddpo.yaml")
    # an existing path, a .yaml name and a path with a folder go to the parser as given
    (tmp_path / "feddpo").write_text("seed_everything: 1\n")
    assert resolve_config("feddpo") == "feddpo"
    for given in ("my_run.yaml", "configs/tiny"):
        assert resolve_config(given) == given
    # a missing file named like a shipped config (a clone's path, outside a clone): the name to use
    for given in ("tiny.yaml", "configs/tiny.yaml"):
        with pytest.raises(UserError, match=rf"^--config: no file '{given}' \(in .*\); did you mean `--config tiny`"):
            resolve_config(given)
    # an unknown name or nothing points at `lightning-fed configs` (issue 34: the parser said
    # "File does not exist" or only "Unexpected config:")
    with pytest.raises(UserError, match=r"^--config 'no_such_config': no such file, and no shipped config of that"):
        resolve_config("no_such_config")
    with pytest.raises(UserError, match=r"^--config '' is empty: .*`lightning-fed configs` lists them"):
        resolve_config("")
    assert resolve_config_args(["fit", "-c", "tiny", "--config=demo", "--model.lr", "tiny"]) == [
        "fit",
        "-c",
        str(CONFIG_DIR / "tiny.yaml"),
        f"--config={CONFIG_DIR / 'demo.yaml'}",
        "--model.lr",
        "tiny",
    ]


def test_lightning_fed_configs_lists_name_method_paper_and_a_line(tmp_path):
    proc = _cli(["configs"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["name", "method", "paper", "description"]
    feddpo = next(line for line in lines if line.startswith("feddpo "))
    row = "feddpo FedDPO OpenFedLLM (Ye et al., 2024) DPO of a LoRA adapter on federated preference pairs,"
    assert feddpo.split() == [*row.split(), "SmolLM2-135M", "offline"]
    assert len([line for line in lines[1:] if line and not line.startswith("run ")]) == len(shipped_configs())


def test_lightning_fed_configs_bad_option_is_one_line_exit_2(tmp_path):
    proc = _cli(["configs", "--sort"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.endswith(f"error: unrecognized arguments: --sort\n{help_tip('lightning-fed configs')}\n")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_fit_takes_a_shipped_name_outside_the_repository(tmp_path):
    proc = _cli(["fit", "--config", "tiny", "--print_config"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "class_path: lightning_fed.modules.DPOModule" in proc.stdout and "rounds: 3" in proc.stdout


# The wheel's contents against the package tree (configs, catalog, task files...):
# tests/packaging/test_wheel_contents.py; the documented install and commands: tests/packaging/test_wheel.py.


@pytest.mark.slow
def test_a_wheel_installed_in_a_fresh_venv_runs_the_configs_by_name(tmp_path):
    """Outside the repository, in a venv holding only the wheel (dependencies through PYTHONPATH,
    the shared environment's site-packages, which has no copy of the package: it is an editable
    install whose .pth is not read from PYTHONPATH): demo resolves by name, tiny trains."""
    wheel = build_wheel(tmp_path / "dist")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=1800)
    python = str(venv / "bin" / "python")
    # without PYTHONPATH: pip would take the checkout's lightning_fed.egg-info for an installed copy
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=1800,
        env=clean,
    )
    deps = {"PYTHONPATH": sysconfig.get_paths()["purelib"]}
    work = tmp_path / "work"
    work.mkdir()
    where = subprocess.run(
        [python, "-c", "import lightning_fed; print(lightning_fed.__file__)"],
        cwd=work,
        env={**ENV, **deps},
        text=True,
        capture_output=True,
    )
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
    listed = _cli(["configs"], cwd=work, python=python, **deps)
    assert listed.returncode == 0 and "\ndemo " in listed.stdout, listed.stderr[-2000:]
    demo = _cli(["fit", "--config", "demo", "--print_config"], cwd=work, python=python, **deps)
    assert demo.returncode == 0 and "SmolLM2-135M-Instruct" in demo.stdout, demo.stderr[-2000:]
    tiny = _cli(["fit", "--config", "tiny", "--trainer.enable_progress_bar=false"], cwd=work, python=python, **deps)
    assert tiny.returncode == 0, tiny.stderr[-2000:]
    assert (work / "runs/tiny/lightning_logs/version_0/summary.json").is_file()
