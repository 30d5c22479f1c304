"""docs/developer/adding-a-method.md's strategy walkthrough, followed as written (issue 42 item 5).

The page's ``<!-- strategy-file: PATH -->`` blocks are written to PATH in a fresh folder (the
package file and the config), its ``<!-- strategy-command -->`` block runs there with ``bash -e``
(``lightning-fed`` being this checkout's CLI) as a subprocess: one round of the shipped ``tiny``
run with the new strategy, exit 0, the run's summary naming the strategy. The same files with a
bad value stop with exit 2 and one line before anything is written. Nothing is copied from the
package: a page that drifts from the code fails here.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.docs.snippets import DOCS
from tests.docs.test_snippets import _env

PAGE = DOCS / "developer" / "adding-a-method.md"
_FILE = re.compile(r"<!-- strategy-file: (\S+) -->\n```\w+\n(.*?)```", re.S)
_COMMAND = re.compile(r"<!-- strategy-command -->\n```bash\n(.*?)```", re.S)


def walkthrough(page: Path = PAGE) -> tuple[dict[str, str], str]:
    """The walkthrough's files (path -> text) and its command, as the page shows them."""
    text = page.read_text(encoding="utf-8")
    files = {m.group(1): m.group(2) for m in _FILE.finditer(text)}
    (command,) = _COMMAND.findall(text)
    return files, command


def _follow(tmp_path: Path, command: str) -> subprocess.CompletedProcess:
    work = tmp_path / "work"
    work.mkdir()
    files, _ = walkthrough()
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    return subprocess.run(["bash", "-e", "-c", command], cwd=work, env=_env(tmp_path), capture_output=True, text=True)


def test_the_page_shows_one_package_file_a_config_and_a_command():
    files, command = walkthrough()
    assert sorted(files) == ["damped.yaml", "my_fed/damped.py"]
    assert "--config damped.yaml" in command


def test_the_walkthrough_runs_one_round_with_the_new_strategy(tmp_path):
    _, command = walkthrough()
    done = _follow(tmp_path, command)
    assert done.returncode == 0, done.stderr[-3000:]
    (summary,) = (tmp_path / "work" / "runs" / "damped").rglob("summary.json")
    data = json.loads(summary.read_text())
    assert data["config"]["federation"]["strategy"]["class_path"] == "my_fed.damped.DampedFedAvg"
    assert [r["round"] for r in data["rounds"]] == [1] and len(data["rounds"][0]["aggregated"]) == 2


def test_a_bad_value_of_the_new_strategy_is_one_line_before_anything_is_written(tmp_path):
    _, command = walkthrough()
    done = _follow(tmp_path, command.replace("damped.yaml", "damped.yaml --federation.strategy.init_args.eta=2"))
    assert done.returncode == 2, done.stderr[-3000:]
    first = done.stderr.strip().splitlines()[0]
    assert first.startswith("error: ") and "eta" in first and first.endswith("got 2.0"), first
    assert not (tmp_path / "work" / "runs").exists()
