"""The fenced blocks of ``docs/`` marked runnable: a ``<!-- run -->`` line right before the fence."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
MARKER = "<!-- run -->"
_FENCE = re.compile(r"^```(\w+)")


@dataclass
class Snippet:
    page: str
    line: int
    language: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def runnable_snippets(docs: Path = DOCS) -> list[Snippet]:
    """Every marked block of every page, in page order; a marker not followed by a fence is an error."""
    found = []
    for page in sorted(docs.rglob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.strip() != MARKER:
                continue
            fence = _FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
            if fence is None:
                raise ValueError(f"{page}:{i + 1}: {MARKER} is not followed by a fenced block")
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            text = "\n".join(lines[i + 2 : end]) + "\n"
            found.append(Snippet(str(page.relative_to(docs)), i + 2, fence.group(1), text))
    return found
