"""No file a user or a peer hands over is unpickled: a crafted checkpoint is refused and runs nothing.

The payload is a pickle whose ``__reduce__`` opens (creates) a marker file when unpickled.
Each test first shows the payload is live (an unsafe ``torch.load`` creates its marker), then
that our loaders refuse it with one line naming the file, and that their marker was not created.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightning_fed.cli import main
from lightning_fed.modules.selector_source import load_selector

ROOT = Path(__file__).resolve().parents[2]


class _Payload:
    """Unpickling this calls ``open(marker, "w")``: code run by loading the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):  # noqa: ANN204
        return (open, (self.marker, "w"))


def _crafted_checkpoint(path: Path, marker: Path) -> Path:
    """A file shaped like a selector run's Lightning checkpoint, with the payload inside."""
    torch.save(
        {"hyper_parameters": {"num_selectors": 1}, "state_dict": {"x": torch.zeros(2)}, "payload": _Payload(marker)},
        path,
    )
    return path


def _assert_payload_is_live(tmp_path: Path) -> None:
    probe = tmp_path / "probe_ran"
    torch.load(_crafted_checkpoint(tmp_path / "probe.ckpt", probe), weights_only=False)
    assert probe.exists()  # the test would catch a loader that unpickles


def test_crafted_selector_checkpoint_is_refused_and_runs_nothing(tmp_path):
    _assert_payload_is_live(tmp_path)
    marker = tmp_path / "selector_payload_ran"
    path = _crafted_checkpoint(tmp_path / "selector.ckpt", marker)
    with pytest.raises(ValueError) as err:
        load_selector(str(path))
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "weights_only=True" in message
    assert not marker.exists()


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", "truncated"])
def test_unreadable_selector_checkpoint_is_one_line_naming_the_file(tmp_path, content):
    path = tmp_path / "selector.ckpt"
    if content == "truncated":
        torch.save({"state_dict": {"w": torch.zeros(1000)}}, path)
        path.write_bytes(path.read_bytes()[:300])
    else:
        path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        load_selector(str(path))
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_crafted_resume_checkpoint_runs_nothing(tmp_path):
    """``fit --ckpt_path`` reads the checkpoint's hyper-parameters before anything is built
    (Lightning's ``_parse_ckpt_path``) and the Trainer restores it: both with weights_only."""
    _assert_payload_is_live(tmp_path)
    marker = tmp_path / "resume_payload_ran"
    path = _crafted_checkpoint(tmp_path / "last.ckpt", marker)
    args = [
        "fit",
        "--config",
        str(ROOT / "configs" / "tiny.yaml"),
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        f"--ckpt_path={path}",
    ]
    with pytest.raises((Exception, SystemExit)):  # noqa: PT011 - how it is reported is the CLI's business
        main(args)
    assert not marker.exists()
