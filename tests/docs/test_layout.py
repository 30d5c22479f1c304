"""The developer guide's layout (docs/developer/architecture.md, "Layout") names every folder and
module at the top of the package, so a newcomer finds each one there."""

from __future__ import annotations

import re
from pathlib import Path

import lightning_fed

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(lightning_fed.__file__).parent


def _layout() -> str:
    text = (ROOT / "docs" / "developer" / "architecture.md").read_text()
    block = re.search(r"## Layout\s*```\n(.*?)```", text, re.S)
    assert block, "architecture.md has no Layout block"
    return block.group(1)


def test_the_layout_lists_every_package_folder_and_module():
    entries = {m.group(1) for m in re.finditer(r"^  (\S+)", _layout(), re.M)}
    names = {
        p.name + "/" if p.is_dir() else p.name
        for p in PACKAGE.iterdir()
        if not p.name.startswith(("_", ".")) and (p.is_dir() or p.suffix == ".py")
    }
    assert names - entries == set(), f"architecture.md's layout leaves out {sorted(names - entries)}"
