"""docs/get-started/demo.md's advice for a slow or busy CPU is true (issue 41, item 12).

The page said ``--federation.rounds=2 --federation.local_steps=2`` was "a third of the steps" of
the demo; it was a sixth (demo: 4 rounds x 2 clients x 6 local steps = 48 steps; that: 8). The
fraction is computed here from the shipped config and the overrides as the CLI merges them
(:mod:`lightning_fed.config_values`), and the overrides are run through ``lightning-fed fit
--print_config`` as a user types them: accepted, and the config holds them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from lightning_fed.config_values import Merged
from lightning_fed.shipped_configs import resolve_config
from lightning_fed.yaml_reading import load

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "get-started" / "demo.md"
ADVICE = re.compile(r"`(--federation\.rounds=\d+ --federation\.local_steps=\d+)` is (a|one) (\w+) of the steps")
FRACTIONS = {"half": 2, "third": 3, "quarter": 4, "fifth": 5, "sixth": 6}


def _advice() -> tuple[list[str], int]:
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    found = ADVICE.search(text)
    assert found, "demo.md no longer gives the smaller demo's options with its share of the steps"
    return found.group(1).split(), FRACTIONS[found.group(3)]


def _steps(overrides: list[str]) -> int:
    """Local steps of a whole run: rounds x clients per round x local steps."""
    merged = Merged()
    merged.apply_file(load(Path(resolve_config("demo")).read_text(encoding="utf-8")))
    for option in overrides:
        key, value = option[2:].split("=", 1)
        merged.apply_option(key, load(value))
    federation = merged.sections["federation"]
    return federation["rounds"] * federation["clients_per_round"] * federation["local_steps"]


def test_the_smaller_demo_is_the_share_of_the_steps_the_page_says():
    overrides, parts = _advice()
    assert _steps(overrides) * parts == _steps([])


def test_the_smaller_demo_s_options_are_taken_as_typed():
    overrides, _ = _advice()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "lightning_fed", "fit", "--config", "demo", *overrides, "--print_config"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr
    printed = yaml.safe_load(proc.stdout)["federation"]
    expected = {key.split(".")[1]: int(value) for key, value in (o[2:].split("=") for o in overrides)}
    assert {key: printed[key] for key in expected} == expected
