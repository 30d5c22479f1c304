"""Claiming and holding a run's version folder (lightning_fed/federation/version_folder.py)."""

from __future__ import annotations

import os

import pytest

from lightning_fed.federation import version_folder
from lightning_fed.federation.version_folder import LOCK_FILE, FolderHeld, checkpoint_run, claim_version, hold


def test_a_folder_made_between_the_listing_and_the_claim_is_skipped(tmp_path, monkeypatch):
    listed = version_folder.taken_versions

    def listing_then_another_run(parent):
        taken = listed(parent)
        (parent / "version_0").mkdir()  # another run claims it right after this listing
        return taken

    monkeypatch.setattr(version_folder, "taken_versions", listing_then_another_run)
    held = claim_version(tmp_path / "lightning_logs")
    assert held.folder.name == "version_1" and held.version == 1
    assert os.listdir(tmp_path / "lightning_logs" / "version_0") == []


def test_a_held_folder_is_refused_to_a_second_holder_until_released(tmp_path):
    first = claim_version(tmp_path)
    (first.folder / "summary.json").write_text("{}")
    with pytest.raises(FolderHeld, match=r"^ckpt_path 'x': another run holds its run folder .*version_0"):
        hold(first.folder, "ckpt_path 'x'")
    first.release()
    second = hold(first.folder, "ckpt_path 'x'")
    second.release()
    assert sorted(os.listdir(first.folder)) == [LOCK_FILE, "summary.json"]  # a resumed folder is never removed


def test_a_claimed_folder_left_empty_is_removed_with_the_folders_made_for_it(tmp_path):
    kept = claim_version(tmp_path / "root" / "lightning_logs")
    (kept.folder / "config.yaml").write_text("")
    empty = claim_version(tmp_path / "root" / "lightning_logs")
    empty.release()
    assert sorted(os.listdir(tmp_path / "root" / "lightning_logs")) == ["version_0"]
    kept.release()
    alone = claim_version(tmp_path / "new" / "lightning_logs")
    alone.release()
    assert not (tmp_path / "new").exists()


def test_a_checkpoint_s_run_folder_is_told_by_its_records_not_its_name(tmp_path):
    """``<folder>/checkpoints/<file>`` belongs to ``<folder>`` when it holds the run's ``rounds.jsonl`` (a run
    folder copied under any name, issue 41 H1) or is named ``version_N``; not a folder of the user's that
    merely holds a ``checkpoints/`` (a ``ModelCheckpoint``'s own ``dirpath``), nor a checkpoint elsewhere."""
    renamed, version, mine = tmp_path / "c" / "runX", tmp_path / "version_3", tmp_path / "mine"
    for folder in (renamed, version, mine):
        (folder / "checkpoints").mkdir(parents=True)
    (renamed / "rounds.jsonl").write_text("")
    assert checkpoint_run(renamed / "checkpoints" / "last.ckpt") == renamed
    assert checkpoint_run(version / "checkpoints" / "last.ckpt") == version
    assert checkpoint_run(mine / "checkpoints" / "last.ckpt") is None
    assert checkpoint_run(renamed / "last.ckpt") is None  # not in its checkpoints/
    assert checkpoint_run("last") is None and checkpoint_run("s3://b/runX/checkpoints/last.ckpt") is None
