"""Every command and config in the docs marked runnable (``<!-- run -->``) runs, offline, on tiny configs.

``bash`` blocks run with ``set -e`` in a fresh folder, ``lightning-fed`` being this checkout's
CLI (``python -m lightning_fed.cli``); ``python`` blocks run as a script with this checkout on
the path; ``yaml`` blocks are parsed by ``lightning-fed fit --config <file> --print_config``.
Blocks marked ``<!-- run slow -->`` are slow tests. The same blocks run against the installed
wheel in ``tests/packaging/test_wheel.py``. See docs/development.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.snippets import DOCS, LANGUAGES, check_output, runnable_snippets, snippet_command

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = runnable_snippets()


def _env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "lightning-fed"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m lightning_fed.cli "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("LIGHTNING_FED_DEBUG", None)
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "PYTHONPATH": str(ROOT)}


def test_the_docs_mark_commands_of_the_start_and_method_pages_runnable():
    pages = {s.page for s in SNIPPETS}
    assert {"get-started/install.md", "get-started/outputs.md", "methods/fedit-feddpo.md"} <= pages
    assert all(s.language in LANGUAGES for s in SNIPPETS), [s.id for s in SNIPPETS]


def test_a_marker_without_a_block_is_an_error(tmp_path):
    (tmp_path / "page.md").write_text("text\n<!-- run -->\nnot a fence\n")
    with pytest.raises(ValueError, match="page.md:2: <!-- run --> is not followed by a fenced block"):
        runnable_snippets(tmp_path)
    (tmp_path / "page.md").write_text("<!-- run -->\n```bash\necho hi\n```\n")
    (snippet,) = runnable_snippets(tmp_path)
    assert (snippet.id, snippet.language, snippet.text, snippet.slow) == ("page.md:2", "bash", "echo hi\n", False)
    (tmp_path / "page.md").write_text("<!-- run slow -->\n```python\nprint(1)\n```\n")
    (snippet,) = runnable_snippets(tmp_path)
    assert (snippet.id, snippet.language, snippet.slow, snippet.output) == ("page.md:2", "python", True, None)
    (tmp_path / "page.md").write_text(
        "<!-- run -->\n```bash\necho a; echo b\n```\n\n<!-- output -->\n```text\nb\n```\n"
    )
    (snippet,) = runnable_snippets(tmp_path)
    assert snippet.output == "b\n"
    check_output(snippet, "a\nb\n")
    with pytest.raises(AssertionError, match=r"page.md:2: the page shows \['b'\], the command printed \['a'\]"):
        check_output(snippet, "b\na\n")


@pytest.mark.parametrize(
    "snippet", [pytest.param(s, marks=[pytest.mark.slow] if s.slow else []) for s in SNIPPETS], ids=lambda s: s.id
)
def test_runnable_snippet(snippet, tmp_path):
    env = _env(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    command = snippet_command(snippet, work, sys.executable)
    proc = subprocess.run(command, cwd=work, env=env, text=True, capture_output=True, timeout=1800)
    assert proc.returncode == 0, f"{DOCS / snippet.page}:{snippet.line}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    check_output(snippet, proc.stdout)
