"""``validate``/``test`` limited to no batch are refused before torch (red team 16 B11).

On f9999e0, ``lightning-fed validate --config <run>/config.yaml --ckpt_path <run>/checkpoints/last.ckpt
--trainer.limit_val_batches=0`` (and ``test`` with ``limit_test_batches=0``) scored nothing and exited 0
silently: no line, no ``<stage>_results.json``, one more events file in the run folder. Now one line naming
the option, its value and the file that set it, exit 2, nothing written; ``fit`` keeps
``limit_val_batches: 0`` (it only turns validation off).
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch
from tests.helpers.tiny_run import CHECKPOINT, tiny_run

ADVICE = "leave it out or give a count >= 1 or a fraction > 0"


def _files(folder):
    return sorted((p.relative_to(folder), p.stat().st_mtime_ns) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return tiny_run(tmp_path_factory)


@pytest.mark.parametrize(
    ("stage", "option", "written", "shown"),
    [
        ("validate", "limit_val_batches", "0", "0"),
        ("validate", "limit_val_batches", "0.0", "0.0"),
        ("validate", "limit_val_batches", '"0"', "0"),
        ("test", "limit_test_batches", "0", "0"),
        ("test", "limit_test_batches", "0.0", "0.0"),
        ("test", "limit_test_batches", '"0"', "0"),
    ],
)
@pytest.mark.parametrize("where", ["command line", "file"])
def test_an_evaluation_limited_to_no_batch_is_one_line_before_torch(
    tmp_path, run, stage, option, written, shown, where
):
    config = run / CHECKPOINT.parents[1] / "config.yaml"
    args = [stage, "--config", str(config), "--ckpt_path", str(run / CHECKPOINT)]
    args += ["--data.init_args.test_dataset=synthetic:preferences"] if stage == "test" else []  # a set to score
    prefix = ""
    if where == "file":
        extra = tmp_path / "limit.yaml"
        extra.write_text(f"trainer:\n  {option}: {written}\n", encoding="utf-8")
        args += ["--config", str(extra)]
        prefix = f"config {str(extra)!r}: "
    else:
        args.append(f"--trainer.{option}={written.strip(chr(34))}")
    before = _files(run)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch(*args, cwd=cwd, hook=tmp_path / "hook")
    line = f"trainer.{option}={shown} scores nothing: {stage} would run no batch; {ADVICE}"
    assert (proc.returncode, proc.stderr) == (2, f"error: {prefix}{line}\n")
    assert (list(cwd.iterdir()), _files(run)) == ([], before)


@pytest.mark.parametrize(
    "args",
    [
        ["fit", "--config", "tiny", "--trainer.limit_val_batches=0"],  # fit: validation off, as in Lightning
        ["validate", "--config", "tiny", "--trainer.limit_test_batches=0"],  # not the set validate scores
        ["validate", "--config", "tiny", "--trainer.limit_val_batches=1"],
        [
            "test",
            "--config",
            "tiny",
            "--data.init_args.test_dataset=synthetic:preferences",
            "--trainer.limit_test_batches=0.5",
        ],
    ],
)
def test_a_limit_of_another_stage_or_of_batches_left_goes_on(tmp_path, args):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch(*args, cwd=cwd, hook=tmp_path / "hook")
    assert proc.returncode != 0 and REACHED_TORCH in proc.stderr, proc.stderr  # past every check made before torch
