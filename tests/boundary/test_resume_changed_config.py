"""A resume whose config changed an option is refused naming the option as the user wrote it
(issue 41): ``--model.init_args.lr=0.01`` over a run trained with ``model.lr: 0.005`` said
``optimizer_states[0].param_groups[0].lr is 0.005, this run's configured optimizer has 0.01`` on
894fdde (the optimizer's state was checked before the config), not ``model.lr`` as
docs/trust_boundary.md says ("the stored config vs the new one ... refused").
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.cli import lightning_fed
from tests.helpers.tiny_run import ARGS, CHECKPOINT, tiny_run


def test_a_changed_lr_is_named_as_the_config_key_with_both_values(tmp_path_factory):
    folder = tmp_path_factory.mktemp("changed_lr")
    path = folder / "last.ckpt"
    shutil.copyfile(tiny_run(tmp_path_factory) / CHECKPOINT, path)
    root = folder / "run"
    proc = lightning_fed(
        "fit",
        "--config",
        "tiny",
        f"--trainer.default_root_dir={root}",
        *ARGS,
        "--model.init_args.lr=0.01",
        f"--ckpt_path={path}",
    )
    line = (
        f"ckpt_path {str(path)!r} was written by a run with another config: model.lr: 0.005 -> 0.01;"
        " resume with the run's own config, or start a new run without --ckpt_path"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert not Path(root).exists()


def test_a_changed_value_a_config_file_set_names_that_file(tmp_path_factory):
    """Red team 11 row 6: ``--config lr.yaml`` setting ``model.init_args.lr`` was refused naming the
    key and both values but not lr.yaml, as the precheck's other lines name the file."""
    folder = tmp_path_factory.mktemp("lr_yaml")
    path = folder / "last.ckpt"
    shutil.copyfile(tiny_run(tmp_path_factory) / CHECKPOINT, path)
    overlay = folder / "lr.yaml"
    overlay.write_text("model:\n  init_args:\n    lr: 0.001\n")
    root = folder / "run"
    args = ["--config", "tiny", "--config", str(overlay), f"--trainer.default_root_dir={root}", *ARGS]
    proc = lightning_fed("fit", *args, f"--ckpt_path={path}")
    line = (
        f"config {str(overlay)!r}: ckpt_path {str(path)!r} was written by a run with another config:"
        " model.lr: 0.005 -> 0.001; resume with the run's own config, or start a new run without --ckpt_path"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert not Path(root).exists()
