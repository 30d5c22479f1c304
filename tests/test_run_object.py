"""The run object is plain, inert data outside ``federation/`` (issue 42 item 2; litgpt's ``Config``).

``lightning_fed.run.FederatedRun`` and its plain part ``lightning_fed.run_config.FederationConfig``
hold the ``federation:`` section and check it; they build nothing (``lightning_fed.run_factory``
builds what each transport needs) and importing them, and validating a run's values, loads no
torch (what a torch-free check before the heavy imports relies on).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import lightning_fed
from lightning_fed.run import FederatedRun
from lightning_fed.run_config import FederationConfig

ROOT = Path(lightning_fed.__file__).parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT.parent)}


def test_importing_and_validating_the_run_loads_no_torch():
    code = (
        "import sys\n"
        "from lightning_fed.run import FederatedRun\n"
        "from lightning_fed.run_config import FederationConfig\n"
        "FederationConfig(rounds=3, compression='topk:0.1', sampling='poisson', sampling_rate=0.5)\n"
        "try:\n"
        "    FederationConfig(rounds=0, compression='int3')\n"
        "except ValueError as err:\n"
        "    print(err)\n"
        "print(sorted(m for m in ('torch', 'lightning', 'numpy') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    problems, loaded = proc.stdout.splitlines()
    assert (
        problems.startswith("federation.rounds must be in [1, ") and "federation.compression must be one of" in problems
    )
    assert loaded == "[]"


def test_the_run_builds_nothing():
    """No method of the run but its validation and its plain-data views."""
    own = {
        name
        for klass in (FederatedRun, FederationConfig)
        for name, value in vars(klass).items()
        if not name.startswith("__") and name not in {f.name for f in fields(FederatedRun)} and callable(value)
    }
    assert own <= {"problems", "to_dict", "_sampling_problems"}, own
    for name in ("run.py", "run_config.py", "run_options.py"):
        tree = ast.parse((ROOT / name).read_text())
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        modules = {n.module if isinstance(n, ast.ImportFrom) else n.names[0].name for n in top}
        assert modules <= {
            "__future__",
            "dataclasses",
            "typing",
            "lightning_fed.limits",
            "lightning_fed.option_rules",  # the value rules, torch-free (the precheck's too)
            "lightning_fed.federation_rules",  # federation.*'s rules and cross-option checks, torch-free
            "lightning_fed.run_config",
            "lightning_fed.run_options",
        }, (name, modules)
