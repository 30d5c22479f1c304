"""The privacy tests marked slow are exactly those docs/privacy.md lists (issue 32: "the privacy tests
that need more than a minute are marked slow and listed in the docs")."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Slow privacy tests"


def _listed() -> set[str]:
    """The test ids in backticks on the list of docs/privacy.md's section ``Slow privacy tests``."""
    text = (ROOT / "docs" / "privacy.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\* `(tests/privacy/[^`]+)`", section, flags=re.MULTILINE))


def test_the_docs_list_every_slow_privacy_test_and_no_other():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-m", "slow", "-q", "-o", "addopts="]
        + ["-p", "no:cacheprovider", "tests/privacy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    # exit 5: "no tests collected" (none is slow today); anything else is a collection error
    assert proc.returncode in (0, 5), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "deselected" in proc.stdout, proc.stdout[-3000:]  # the privacy tests were collected
    marked = {line for line in proc.stdout.splitlines() if line.startswith("tests/privacy/")}
    assert _listed() == marked
