"""An option is never abbreviated, in any subcommand (docs/guides/running.md; issue 41, red team item 1).

Before, argparse took any unambiguous prefix: ``configs --cop tiny`` wrote ``tiny.yaml``,
``plan --batch 4`` was ``--batch-size 4``, ``report --met`` was ``--metric``; ``evaluate
--bench`` got argparse's "ambiguous option" and ``fit --conf`` an error that did not name
``--config``. Each is now refused with exit 2, the option meant named, and nothing written.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_fed.errors import help_tip

ROOT = Path(__file__).resolve().parents[1]


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    for name in ("LIGHTNING_FED_DEBUG", "LIGHTNING_FED_VERBOSE", "LIGHTNING_FED_LIVE_HELP"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "lightning_fed", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800
    )


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (
            ["configs", "--cop", "tiny"],
            f"error: unrecognized arguments: --cop tiny; did you mean --copy?\n{help_tip('lightning-fed configs')}\n",
        ),
        (
            ["report", "--met", "loss", "some_run"],
            f"error: unrecognized arguments: --met; did you mean --metric?\n{help_tip('lightning-fed report')}\n",
        ),
        (
            ["evaluate", "--run", "some_run", "--bench", "[lm_eval]"],
            "error: unrecognized arguments: --bench [lm_eval]; did you mean --benchmarks?\n"
            f"{help_tip('lightning-fed evaluate')}\n",
        ),
        (
            ["plan", "--config", "tiny", "--batch", "4"],
            f"error: unrecognized arguments: --batch 4; did you mean --batch-size?\n{help_tip('lightning-fed plan')}\n",
        ),
        (
            ["fit", "--conf", "tiny"],
            "error: unknown option --conf for `lightning-fed fit`; did you mean --config?\n",
        ),
    ],
    ids=["configs", "report", "evaluate", "plan", "fit"],
)
def test_an_abbreviated_option_is_refused_naming_the_option(tmp_path, args, stderr):
    proc = _run(tmp_path, *args)
    assert (proc.returncode, proc.stderr) == (2, stderr)
    assert list(tmp_path.iterdir()) == []


def test_an_abbreviation_in_flower_s_subcommands_is_one_line_and_the_tip(tmp_path):
    """The error line and the tip, as every other subcommand reports an argument error (87636cb;
    it was argparse's usage, then the error line)."""
    proc = _run(tmp_path, "flower", "clientapp", "--poll", "-1")
    assert (proc.returncode, proc.stderr) == (
        2,
        "error: unrecognized arguments: --poll -1; did you mean --poll-interval?\n"
        f"{help_tip('lightning-fed flower')}\n",
    )
    assert list(tmp_path.iterdir()) == []


def test_every_parser_of_the_package_refuses_abbreviations():
    """A new ``ArgumentParser(...)`` would take abbreviations again: each is built with ``allow_abbrev=False``
    (or is a :class:`~lightning_fed.strict_parser.StrictParser`)."""
    plain = []
    for path in sorted((ROOT / "lightning_fed").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            refused = any(
                k.arg == "allow_abbrev" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in node.keywords
            )
            if name.endswith("ArgumentParser") and not refused:
                plain.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert plain == []
