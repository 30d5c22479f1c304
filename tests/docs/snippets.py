"""The fenced blocks of ``docs/`` marked runnable: a ``<!-- run -->`` line right before the fence.

``<!-- run slow -->`` marks a block that takes more than about a minute (a real model, Ray): it
runs under ``pytest -m slow`` and in the wheel test (``tests/packaging/test_wheel.py``).
A block marked runnable may be followed by an ``<!-- output -->`` line and a fenced block: the
last lines the command prints on stdout, checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
MARKER = "<!-- run -->"
SLOW_MARKER = "<!-- run slow -->"
OUTPUT_MARKER = "<!-- output -->"
LANGUAGES = ("bash", "yaml", "python")
_FENCE = re.compile(r"^```(\w+)")


@dataclass
class Snippet:
    page: str
    line: int
    language: str
    text: str
    slow: bool = False
    output: str | None = None  # the last lines printed on stdout, when the page shows them

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def runnable_snippets(docs: Path = DOCS) -> list[Snippet]:
    """Every marked block of every page, in page order; a marker not followed by a fence is an error."""
    found = []
    for page in sorted(docs.rglob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.strip() not in (MARKER, SLOW_MARKER):
                continue
            fence = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
            if fence is None:
                raise ValueError(f"{page}:{i + 1}: {line.strip()} is not followed by a fenced block")
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            text = "\n".join(lines[i + 2 : end]) + "\n"
            slow = line.strip() == SLOW_MARKER
            found.append(Snippet(str(page.relative_to(docs)), i + 2, fence.group(1), text, slow, _output(lines, end)))
    return found


def _output(lines: list[str], end: int) -> str | None:
    """The ``<!-- output -->`` block after the fence closing at ``end``, if any."""
    rest = [j for j in range(end + 1, len(lines)) if lines[j].strip()]
    if len(rest) < 2 or lines[rest[0]].strip() != OUTPUT_MARKER or not lines[rest[1]].startswith("```"):
        return None
    start = rest[1] + 1
    stop = next(j for j in range(start, len(lines)) if lines[j].startswith("```"))
    return "\n".join(lines[start:stop]) + "\n"


def check_output(snippet: Snippet, stdout: str) -> None:
    """``stdout`` ends with the lines the page shows for ``snippet`` (if it shows any)."""
    if snippet.output is None:
        return
    expected = snippet.output.splitlines()
    got = stdout.splitlines()[-len(expected) :]
    assert got == expected, f"{snippet.id}: the page shows {expected}, the command printed {got}"


def snippet_command(snippet: Snippet, work: Path, python: str) -> list[str]:
    """The command running ``snippet`` in ``work``: ``bash -e`` for bash, ``python`` for Python, and
    ``lightning-fed fit --config <file> --print_config`` for a YAML config."""
    if snippet.language == "yaml":
        (work / "snippet.yaml").write_text(snippet.text)
        return ["lightning-fed", "fit", "--config", "snippet.yaml", "--print_config"]
    if snippet.language == "python":
        (work / "snippet.py").write_text(snippet.text)
        return [python, "snippet.py"]
    return ["bash", "-e", "-c", snippet.text]
