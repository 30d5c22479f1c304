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


def test_a_run_refused_at_its_start_takes_away_what_it_wrote_and_nothing_else(tmp_path):
    earlier = claim_version(tmp_path)
    (earlier.folder / "checkpoints").mkdir()
    (earlier.folder / "checkpoints" / "last.ckpt").write_text("earlier run")
    earlier.release()
    resumed = hold(earlier.folder, "ckpt_path 'x'")  # a resume refused as it starts (RefusedAtStart)
    (resumed.folder / "events.out.tfevents.1").write_text("")  # Lightning's logger, before the loop's check
    (resumed.folder / "client_metrics" / "val").mkdir(parents=True)
    (resumed.folder / "client_metrics" / "val" / "round_000000.parquet").write_text("")
    resumed.remove_written()
    resumed.release()
    assert sorted(os.listdir(earlier.folder)) == [LOCK_FILE, "checkpoints"]
    assert (earlier.folder / "checkpoints" / "last.ckpt").read_text() == "earlier run"
    new = claim_version(tmp_path / "runs")
    (new.folder / "events.out.tfevents.2").write_text("")
    new.remove_written()
    new.release()
    assert not (tmp_path / "runs").exists()  # a new run's folder goes with the folders made for it
