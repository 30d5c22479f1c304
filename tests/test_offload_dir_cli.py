"""``federation.state_offload_dir`` that names an existing file is refused before torch.

On a8debca (seventh outside run) tiny with ``state_offload_dir: tiny_orig.yaml`` (a file) ran its
rounds and exited 0: the store writes nothing there without offloading or personal state, so the
value was silently ignored; a run that does offload would have failed mid-run. It is now refused
as ``trainer.default_root_dir`` is, one line, exit 2, nothing written.
"""

from __future__ import annotations

from tests.helpers.cli import heavy_blocked_env, lightning_fed


def test_an_offload_dir_that_is_a_file_is_one_line_before_torch(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "tiny_orig.yaml").write_text("seed_everything: 0\n")
    (tmp_path / "run.yaml").write_text("federation:\n  state_offload_dir: tiny_orig.yaml\n")
    config = str(tmp_path / "run.yaml")
    proc = lightning_fed("fit", "--config", "tiny", "--config", config, cwd=work, env=heavy_blocked_env(tmp_path / "b"))
    where = str(work / "tiny_orig.yaml")
    line = f"config {config!r}: federation.state_offload_dir 'tiny_orig.yaml': {where!r} is a file, not a folder"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert sorted(p.name for p in work.iterdir()) == ["tiny_orig.yaml"]


def test_an_offload_dir_under_a_file_is_refused_from_the_command_line(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "f").write_text("x")
    proc = lightning_fed(
        "fit", "--config", "tiny", "--federation.state_offload_dir=f/states", cwd=work, env=heavy_blocked_env(tmp_path)
    )
    line = f"federation.state_offload_dir 'f/states': {str(work / 'f')!r} is a file, not a folder"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert sorted(p.name for p in work.iterdir()) == ["f"]
