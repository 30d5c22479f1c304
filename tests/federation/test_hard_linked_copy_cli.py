"""A resume of a run folder copied with hard links (``cp -al``) never writes through a file it shares
with the original (federation/run_folder.py ``replace_bytes``/``own_files``, round_history.py,
csv_metrics.py).

Red team 16 B07: the resume cut ``rounds.jsonl`` back and appended to it in place, through the inode
the copy shares with the original, so the original run's ``rounds.jsonl`` listed the resumed round too
(3 rounds beside a checkpoint and a summary of 2). A CSV logger's ``metrics.csv`` is appended in place
the same way, and its ``hparams.yaml`` rewritten in place at each save.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.helpers.cli import lightning_fed
from tests.helpers.tiny_run import ARGS, CHECKPOINT, tiny_run

CSV = "--trainer.logger={class_path: lightning.pytorch.loggers.CSVLogger, init_args: {save_dir: %s}}"


def _tree(folder: Path) -> dict[str, tuple[str, int]]:
    """Each file's digest and modification time: a file the resume wrote through with the same bytes
    (PEFT's ``adapter_config.json``, written again in place) shows by its time."""
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _hard_linked_copy(source: Path, copy: Path) -> None:
    """``cp -al source copy``: the folders, and a hard link per file."""
    for folder, _, names in os.walk(source):
        target = copy / Path(folder).relative_to(source)
        target.mkdir(parents=True)
        for name in names:
            os.link(Path(folder) / name, target / name)


@pytest.mark.parametrize("logger", ["tensorboard", "csv"])
def test_a_resume_of_a_hard_linked_copy_leaves_the_original_byte_for_byte(tmp_path, tmp_path_factory, logger):
    """On f6ad729 (tensorboard) the original's rounds.jsonl held the copy's round 2 as well, and its
    adapter's README.md and adapter_config.json were written again (same bytes, a new time); (csv)
    its rounds.jsonl and metrics.csv changed and its hparams.yaml was written again."""
    extra = [CSV % (tmp_path / "csv_root")] if logger == "csv" else []
    if logger == "csv":
        root = f"--trainer.default_root_dir={tmp_path / 'root'}"
        first = lightning_fed("fit", "--config", "configs/tiny.yaml", root, *ARGS, *extra)
        assert first.returncode == 0, first.stderr[-3000:]
        original = tmp_path / "csv_root" / CHECKPOINT.parents[1]
    else:
        original = tmp_path / "original"
        shutil.copytree(tiny_run(tmp_path_factory) / CHECKPOINT.parents[1], original)
    kept = _tree(original)
    copy = tmp_path / "backup" / "hl"
    _hard_linked_copy(original, copy)
    proc = lightning_fed(
        "fit",
        "--config",
        "configs/tiny.yaml",
        f"--trainer.default_root_dir={tmp_path / 'root'}",
        *ARGS[:-1],
        *extra,
        "--federation.rounds=2",
        f"--ckpt_path={copy / 'checkpoints' / 'last.ckpt'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1].startswith(f"run folder: {copy};"), proc.stdout[-2000:]
    assert _tree(original) == kept
    rounds = [json.loads(line)["round"] for line in (copy / "rounds.jsonl").read_text().splitlines()]
    assert rounds == [1, 2]
    if logger == "csv":
        assert (copy / "metrics.csv").read_bytes() != (original / "metrics.csv").read_bytes()
