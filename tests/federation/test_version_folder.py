"""Claiming and holding a run's version folder (lightning_fed/federation/version_folder.py)."""

from __future__ import annotations

import os

import pytest

from lightning_fed.federation import version_folder
from lightning_fed.federation.version_folder import LOCK_FILE, FolderHeld, claim_version, hold


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
