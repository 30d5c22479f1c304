"""Every round hook the precheck accepts by short name is one the live parser resolves (issue 41).

jsonargparse resolves a short ``class_path`` among the imported subclasses of the option's base
class only. On baaf8e7 the CLI had imported ``lightning_fed.heterogeneity`` and the callbacks
before it parsed, not ``round_hooks``, ``selection`` or ``evaluation.heldout``: ``federation.hooks:
[{class_path: ClientGrouping}]`` (the precheck's own "did you mean ClientGrouping?") and
``--federation.hooks+=ClientGrouping`` were refused after the imports (11-14.5 s of CPU) with
``Expected a dot import path string: ClientGrouping`` (the fourth outside run). The check runs in a
fresh interpreter, so what this test process imported cannot hide a missing import.
"""

from __future__ import annotations

import subprocess
import sys

from lightning_fed.class_paths import package_subclasses
from tests.helpers.cli import ENV

LIVE = """
import lightning_fed.federated_cli  # what the CLI imports before it parses
from lightning_fed.federation import RoundHook

def below(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from below(sub)

print(" ".join(sorted({c.__name__ for c in below(RoundHook)})))
"""


def test_every_short_hook_name_the_precheck_takes_is_resolved_by_the_live_parser():
    proc = subprocess.run([sys.executable, "-c", LIVE], capture_output=True, text=True, env=ENV, check=True)
    live = set(proc.stdout.split())
    assert sorted(package_subclasses("RoundHook") - live) == []
