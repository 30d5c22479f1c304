"""Build this checkout's wheel the way a release would: from a copy of the files git knows.

The copy (tracked files plus untracked ones git does not ignore) keeps ``build/`` and
``*.egg-info`` out of the checkout and leaves out what only a working folder has (``.venv``,
``runs/``, caches), so the wheel holds what a clean clone would build. The build uses this
environment's setuptools (``--no-build-isolation``: no download).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "lightning_fed"


def source_files(root: Path = ROOT) -> list[str]:
    """Paths (relative to ``root``) of the files a clean clone has, working-tree versions."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted(p for p in out.split("\0") if p and (root / p).exists())


def build_wheel(dest: Path, root: Path = ROOT) -> Path:
    """The wheel built from a copy of ``root``'s files, written to ``dest``."""
    src = dest / "src"
    for rel in source_files(root):
        target = src / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (root / rel).is_symlink():
            target.symlink_to((root / rel).readlink())
        else:
            shutil.copy2(root / rel, target)
    out = dest / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("lightning_fed-*.whl")
    return wheel


def wheel_names(wheel: Path) -> set[str]:
    """The files of ``wheel`` under the package folder."""
    with zipfile.ZipFile(wheel) as zf:
        return {n for n in zf.namelist() if n.startswith(f"{PACKAGE}/")}


def package_tree(root: Path = ROOT) -> set[str]:
    """The files of the package folder a clean clone has (what the wheel must hold)."""
    return {p for p in source_files(root) if p.startswith(f"{PACKAGE}/")}
