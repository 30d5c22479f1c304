"""``lightning-fed fit --help`` as a process whose libraries are newer than the ones the stored
pages were made with (issue 41 item 9): ``pip install`` resolved transformers 5.24.0 against
pages made with 5.23.0, and every ``--help`` built the live parser (torch imported, 12-19 s of
CPU). A newer transformers or PEFT shapes no option of the pages, so the stored page answers.

The process is the CLI module run as ``python -m lightning_fed.cli`` would run it, with
``importlib.metadata.version`` answering newer versions for those two libraries (what a newer
install reports), and says at exit whether torch was imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_fed import help_pages

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
for name in ("LIGHTNING_FED_DEBUG", "LIGHTNING_FED_VERBOSE", help_pages.LIVE_ENV):
    ENV.pop(name, None)
ENV["COLUMNS"] = str(help_pages.COLUMNS)

NEWER = """
import importlib.metadata, runpy, sys
real = importlib.metadata.version
newer = {"transformers": "5.99.0", "peft": "0.99.0"}
importlib.metadata.version = lambda name: newer.get(name) or real(name)
sys.argv = ["lightning-fed", *sys.argv[1:]]
try:
    runpy.run_module("lightning_fed.cli", run_name="__main__")
finally:
    print("torch imported:", "torch" in sys.modules, file=sys.stderr)
"""


@pytest.mark.parametrize("subcommand", ["fit", "evaluate", "report", "plan"])
def test_help_with_a_newer_transformers_and_peft_is_the_stored_page_without_torch(tmp_path, subcommand):
    proc = subprocess.run(
        [sys.executable, "-c", NEWER, subcommand, "--help"], cwd=tmp_path, env=ENV, capture_output=True, text=True
    )
    assert (proc.returncode, proc.stderr) == (0, "torch imported: False\n"), proc.stderr[-3000:]
    assert proc.stdout == help_pages.stored()["pages"][subcommand]
    assert list(tmp_path.iterdir()) == []  # nothing written
