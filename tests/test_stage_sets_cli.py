"""``lightning-fed test`` without ``data.test_dataset`` refused before torch (issue 41, item 1).

On baaf8e7 ``test --config tiny`` was refused only after the imports and the model's build (exit 2,
13.1 s of CPU); the child here, whose ``import torch`` fails, reached it. The line is the data
module's own (:data:`lightning_fed.stage_sets.NO_TEST_SET`).
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

LINE = "data.test_dataset is not set: `test` scores a separate test set; pass --data.init_args.test_dataset=<file>"


def _run(tmp_path: Path, *args: str, files: dict[str, str] | None = None):
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    for name, text in (files or {}).items():
        (cwd / name).write_text(text)
    return lightning_fed_without_torch(*args, cwd=cwd, hook=tmp_path / "hook"), cwd


def test_test_without_a_test_set_is_refused_before_torch(tmp_path):
    proc, cwd = _run(tmp_path, "test", "--config", "tiny")
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (2, f"error: {LINE}\n")
    assert list(cwd.iterdir()) == []


def test_a_test_set_unset_by_a_later_file_is_refused(tmp_path):
    files = {
        "a.yaml": "data:\n  init_args: {test_dataset: t.jsonl}\n",
        "b.yaml": "data:\n  init_args: {test_dataset: null}\n",
    }
    proc, _ = _run(tmp_path, "test", "--config", "tiny", "--config", "a.yaml", "--config", "b.yaml", files=files)
    assert (proc.returncode, proc.stderr) == (2, f"error: {LINE}\n")


def test_a_test_set_a_user_s_data_module_or_another_stage_goes_on(tmp_path):
    """Nothing certain: a test set given, a user's own data module (it may load one its own way),
    ``fit`` and ``validate`` (every data module has a validation set)."""
    own = {"my_data_41.py": "class MyData:\n    pass\n", "t.jsonl": '{"prompt": "p", "chosen": "a", "rejected": "b"}\n'}
    for args in (
        ["test", "--config", "tiny", "--data.init_args.test_dataset=t.jsonl"],
        ["test", "--config", "tiny", "--data=my_data_41.MyData"],
        ["validate", "--config", "tiny"],
    ):
        proc, _ = _run(tmp_path, *args, files=own)
        assert REACHED_TORCH in proc.stderr, (args, proc.stderr)
