"""``lightning-fed configs --copy`` checks every destination before it writes anything, and the
copied configs' headers show commands that work outside a clone (issue 41 items 7 and 12)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from lightning_fed.shipped_configs import shipped_configs

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lightning_fed.cli", *args]
    return subprocess.run(cmd, cwd=cwd, env=ENV, text=True, capture_output=True)


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_file_where_the_example_folder_goes_stops_the_copy_before_anything_is_written(tmp_path):
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "own_data").write_text("mine\n")
    proc = _cli(tmp_path, "configs", "--copy", "own_data")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [
        f"error: lightning-fed configs: --copy own_data: {tmp_path / 'examples' / 'own_data'} is a file, not a folder"
        " (it would hold examples/own_data/test.jsonl); nothing written",
    ]
    assert _tree(tmp_path) == ["examples", "examples/own_data"]  # no own_data.yaml
    assert (tmp_path / "examples" / "own_data").read_text() == "mine\n"


def test_copy_given_twice_is_refused_naming_both_before_anything_is_written(tmp_path):
    """Red team 15 L4: argparse kept the last ``--copy`` (on 589572a ``--copy tiny --copy demo`` wrote
    demo.yaml alone, exit 0, tiny dropped without a word). The docs give one NAME per call."""
    proc = _cli(tmp_path, "configs", "--copy", "tiny", "--copy=demo")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [
        "error: lightning-fed configs: --copy given 2 names ('tiny', 'demo'); it copies one per call:"
        " run it once for each; nothing written",
    ]
    assert _tree(tmp_path) == []


def test_no_shipped_config_header_runs_a_clone_path():
    """``--config configs/x.yaml`` works only in a clone; the shipped name works anywhere."""
    found = [
        f"{path.name}: {line}"
        for path in shipped_configs().values()
        for line in path.read_text().splitlines()
        if line.startswith("#") and re.search(r"--config[ =]configs/", line)
    ]
    assert found == []


def test_the_copied_tiny_header_command_runs_in_the_copy_folder(tmp_path):
    proc = _cli(tmp_path, "configs", "--copy", "tiny")
    assert proc.returncode == 0, proc.stderr
    header = [line for line in (tmp_path / "tiny.yaml").read_text().splitlines() if line.startswith("#")]
    commands = re.findall(r"`(lightning-fed [^`]+)`", " ".join(header))
    assert commands == ["lightning-fed fit --config tiny", "lightning-fed configs --copy tiny"], header
    assert "`--config tiny.yaml`" in " ".join(header)
    printed = _cli(tmp_path, "fit", "--config", "tiny.yaml", "--print_config")
    assert printed.returncode == 0, printed.stderr
    assert "n_positions: 256" in printed.stdout


def test_the_flower_app_says_how_to_simulate_it_with_flwr_run(tmp_path):
    """Issue 41 item 11: the copied app's header and the README show `flwr run` on the local
    SuperLink with one virtual SuperNode per client of the app's default config (not the
    deprecated `run_simulation`)."""
    import yaml

    proc = _cli(tmp_path, "configs", "--copy", "flower_app")
    assert proc.returncode == 0, proc.stderr
    header = (tmp_path / "flower_app" / "pyproject.toml").read_text()
    clients = yaml.safe_load(shipped_configs()["tiny"].read_text())["data"]["init_args"]["num_clients"]
    command = f'flwr run . --stream --federation-config "num-supernodes={clients} client-resources-num-cpus=1"'
    assert command in header and '\nconfig = "tiny" ' in header
    readme = (ROOT / "README.md").read_text()
    flower = readme[readme.index("## Flower:") : readme.index("## Where things are")]
    assert command in flower and "run_simulation(" not in flower
