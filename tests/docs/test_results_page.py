"""The Results page summarises ``benchmarks/RESULTS.md`` and links into it (the "All measurements"
page includes the file): every link's section exists, and the summary stays a summary."""

from __future__ import annotations

import re
from pathlib import Path

import markdown

ROOT = Path(__file__).resolve().parents[2]


def _section_ids() -> set[str]:
    """The heading ids of RESULTS.md as the site's ``toc`` extension makes them."""
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    html = markdown.markdown(text, extensions=["toc", "tables", "pymdownx.superfences"])
    return set(re.findall(r'<h[1-6] id="([^"]+)"', html))


def test_every_link_of_the_summary_names_a_section_of_the_measurements():
    summary = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    anchors = re.findall(r"\]\(benchmarks\.md#([^)]+)\)", summary)
    assert len(anchors) >= 20  # each summarised result links to its section
    assert sorted(set(anchors) - _section_ids()) == []


def test_the_summary_is_a_summary_and_the_full_page_includes_the_file():
    summary = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert "--8<--" not in summary and len(summary.splitlines()) < 100
    assert '--8<-- "benchmarks/RESULTS.md"' in (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
