"""The README is also the package's description on PyPI (setup.cfg ``long_description``), where a
relative link goes nowhere: its links are absolute, pages of the repository are named as code
(``docs/privacy.md``), and its figures are files that exist in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(!?)\[[^\]]*\]\(([^)\s]+)[^)]*\)")


def _links(text: str) -> list[tuple[bool, str]]:
    return [(bang == "!", target) for bang, target in LINK.findall(text)]


def test_the_link_pattern_finds_links_and_images():
    found = _links("see [a](docs/a.md) and ![fig](docs/images/x.png 'title') and [b](https://x.org/b)")
    assert found == [(False, "docs/a.md"), (True, "docs/images/x.png"), (False, "https://x.org/b")]


def test_readme_links_are_absolute_and_its_figures_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = _links(text)
    relative = [t for image, t in found if not image and not t.startswith(("https://", "http://"))]
    assert relative == [], "a relative link breaks on PyPI: name the page as code or link it absolutely"
    figures = [t for image, t in found if image]
    assert figures, "the README shows measured figures"
    assert [t for t in figures if not (ROOT / t).is_file()] == []
    for path in re.findall(r"`((?:docs|benchmarks)/[\w/.-]+\.(?:md|py|png))`", text):
        assert (ROOT / path).is_file(), f"README names {path}, which does not exist"
