"""Byte-for-byte snapshots of folders, to show that a failed run left earlier files alone."""

from __future__ import annotations

from pathlib import Path


def snapshot(folder: str | Path) -> dict[Path, bytes]:
    """Every file under ``folder`` (recursively) -> its bytes."""
    return {p: p.read_bytes() for p in Path(folder).rglob("*") if p.is_file()}


def assert_unchanged(before: dict[Path, bytes], folder: str | Path) -> None:
    """Assert that ``folder`` holds exactly the files of ``before``, with the same bytes."""
    after = snapshot(folder)
    added = sorted(str(p) for p in after.keys() - before.keys())
    removed = sorted(str(p) for p in before.keys() - after.keys())
    changed = sorted(str(p) for p in before.keys() & after.keys() if before[p] != after[p])
    assert not (added or removed or changed), f"added {added}, removed {removed}, changed {changed}"
