"""The documentation site builds with warnings as errors: broken links, missing anchors, pages left out
of the navigation, docstring errors in the API reference (``mkdocs build --strict``, offline)."""

from __future__ import annotations

import os
import sys

from tests.helpers.cli import ROOT, run_process


def test_mkdocs_build_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = run_process(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")], env=env
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    page = (tmp_path / "site" / "methods" / "fedpdpo" / "index.html").read_text()
    assert "Eq." in page and "modules/pdpo_loss.py" in page
    api = (tmp_path / "site" / "reference" / "report" / "index.html").read_text()
    assert "find_runs" in api  # generated from the docstrings
    results = (tmp_path / "site" / "results" / "index.html").read_text()
    assert "Ten thousand clients" in results  # the summary
    everything = (tmp_path / "site" / "benchmarks" / "index.html").read_text()
    assert "round_time_ratio_10000_vs_10" in everything  # benchmarks/RESULTS.md included


def test_the_readme_keeps_the_two_commands_first_and_stays_short():
    text = (ROOT / "README.md").read_text()
    assert text.splitlines()[:4] == [
        "```bash",
        "make demo   # creates .venv, installs the pinned stack (torch==2.13.0 CPU), runs configs/demo.yaml offline",
        "make test   # same set-up, then runs the test suite offline (HF_HUB_OFFLINE=1)",
        "```",
    ]
    assert len(text.splitlines()) <= 200
