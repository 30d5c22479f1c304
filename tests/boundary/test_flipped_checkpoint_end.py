"""A checkpoint whose zip directory's last bytes were flipped (it still opens as a zip, torch's
reader refuses it) is refused in one complete line (issue 41): on 894fdde the line ended mid-word
(``... If you are seeing this error, there is a high likelihood that your checkpoint file is
corrupted. Thi)``), torch's message cut at 200 characters."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.cli import lightning_fed
from tests.helpers.tiny_run import ARGS, CHECKPOINT, tiny_run


def test_flipped_end_bytes_are_refused_in_one_complete_line(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flip_end")
    data = bytearray((tiny_run(tmp_path_factory) / CHECKPOINT).read_bytes())
    data[-30] ^= 0xFF  # the zip64 end-of-directory locator's offset: Python's zipfile ignores it, torch's does not
    path = folder / "last.ckpt"
    path.write_bytes(bytes(data))
    root = folder / "run"
    proc = lightning_fed("fit", "--config", "tiny", f"--trainer.default_root_dir={root}", *ARGS, f"--ckpt_path={path}")
    line = (
        f"ckpt_path {str(path)!r}: not a safe, complete checkpoint: the file is incomplete or corrupt, or holds"
        " objects that weights_only=True refuses"
        " (RuntimeError: PytorchStreamReader failed reading zip archive: not a ZIP archive.)"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert not Path(root).exists()
