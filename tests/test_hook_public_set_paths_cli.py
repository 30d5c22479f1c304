"""A round hook's public set given as a path no reader takes (a ``.txt`` file, a FIFO) or as a data file
``datasets`` cannot read is refused before torch is imported, in one line naming
``federation.hooks[i].<option>`` and the config file, as ``data.dataset`` is
(lightning_fed/hook_cross_rules.py's ``anchors_problem``; lightning_fed/data_paths.py, data_files.py).

Red team 15 H4: on 4a8638c a ``HeldOutRouge`` hook whose ``dataset`` was ``notes.txt`` trained round 1,
wrote a ``version_N`` folder with its ``summary.json``, then exited 2 naming ``data.dataset``. The
children cannot import torch (``tests/helpers/cli.py``); each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lightning_fed.data_paths import SUPPORTED
from tests.helpers.refusals import assert_refused_before_torch, shipped_config, write_config

HELD_OUT = {
    "model": {
        "init_args": {
            "backbone": {
                "name_or_path": None,
                "config": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 512},
                "tokenizer": "bytes",
            },
            "lora": {"r": 4, "alpha": 8, "dropout": 0.0},
        }
    },
    "data": {
        "init_args": {
            "num_clients": 4,
            "synthetic_args": {"examples_per_client": 8, "families_per_client": 2},
            "max_length": 512,
            "on_overflow": "truncate",
        }
    },
    "federation": {"rounds": 1, "clients_per_round": 2, "local_steps": 1},
    "trainer": {"enable_progress_bar": False, "enable_model_summary": False},
}
"""Red team 15's ``hr_tiny.yaml`` over the shipped ``fedit``, without its hook."""


def _fifo(path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(path)


# name -> (file name, its text or a function making it at a path, the problem said after `<option> '<file>'`)
CASES = {
    "txt": ("notes.txt", "some notes\n", f": unsupported file type '.txt'; {SUPPORTED}"),
    "fifo": ("held.jsonl", _fifo, f" is not a regular file (a device, FIFO or socket); {SUPPORTED}"),
    "empty": ("held.jsonl", "", " holds no rows (the file is empty)"),
}


def _data_file(tmp_path: Path, name: str, content: object) -> Path:
    path = tmp_path / "data" / name
    path.parent.mkdir()
    if callable(content):
        content(path)
    else:
        path.write_text(content, encoding="utf-8")
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_held_out_rouge_dataset_no_reader_takes_is_refused_before_training(tmp_path, case):
    """H4: HeldOutRouge's ``dataset`` in a second file over ``fedit``, named as that hook's option."""
    name, content, problem = CASES[case]
    data = _data_file(tmp_path, name, content)
    hook = {
        "class_path": "lightning_fed.evaluation.heldout.HeldOutRouge",
        "init_args": {"dataset": str(data), "max_new_tokens": 4, "every_n_rounds": 1, "max_examples": 2},
    }
    config = {**HELD_OUT, "federation": {**HELD_OUT["federation"], "hooks": [hook]}}
    config["trainer"] = {**HELD_OUT["trainer"], "default_root_dir": str(tmp_path / "runs")}
    hooks = write_config(tmp_path, config, "hr_tiny.yaml")
    line = f"federation.hooks[0].dataset {str(data)!r}{problem}"
    args = ["fit", "--config", "fedit", "--config", str(hooks)]
    assert_refused_before_torch(tmp_path, args, line, config_file=hooks)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("case", ["txt", "fifo"])
def test_fedhds_anchors_no_reader_takes_is_refused_before_torch(tmp_path, case):
    """FedHDS's ``anchors``: the same lines, naming ``federation.hooks[0].anchors``."""
    name, content, problem = CASES[case]
    data = _data_file(tmp_path, name, content)
    config = shipped_config("fedhds_turbo_tiny")
    config["federation"]["hooks"][0]["init_args"]["anchors"] = str(data)
    path = write_config(tmp_path, config)
    line = f"federation.hooks[0].anchors {str(data)!r}{problem}"
    assert_refused_before_torch(tmp_path, ["fit", "--config", str(path)], line, config_file=path)


FOLDER_STRAY = (
    " holds 'late.jsonl', a FIFO, not a regular data file (never opened); a data folder holds only"
    " .json/.jsonl/.csv/.parquet files of one format (move it out of the folder)"
)


@pytest.mark.parametrize("hook", ["HeldOutRouge", "HierarchicalDataSelection"])
def test_a_hook_folder_holding_a_fifo_beside_its_data_is_refused_before_torch(tmp_path, hook):
    """Red team B03: a hook's data folder holding a FIFO beside a good ``.jsonl`` passed the precheck (the
    FIFO skipped without a word); named as that hook's option, before torch, no run folder."""
    data = _data_file(tmp_path, "held.jsonl", '{"instruction": "Say hi.", "output": "hi"}\n').parent
    _fifo(data / "late.jsonl")
    if hook == "HeldOutRouge":
        init_args = {"dataset": str(data), "max_new_tokens": 4, "every_n_rounds": 1, "max_examples": 2}
        held_out = {"class_path": "lightning_fed.evaluation.heldout.HeldOutRouge", "init_args": init_args}
        config = {**HELD_OUT, "federation": {**HELD_OUT["federation"], "hooks": [held_out]}}
        config["trainer"] = {**HELD_OUT["trainer"], "default_root_dir": str(tmp_path / "runs")}
        path, args, option = write_config(tmp_path, config, "hr_tiny.yaml"), ["--config", "fedit"], "dataset"
    else:
        config = shipped_config("fedhds_turbo_tiny")
        config["federation"]["hooks"][0]["init_args"]["anchors"] = str(data)
        config["trainer"]["default_root_dir"] = str(tmp_path / "runs")
        path, args, option = write_config(tmp_path, config), [], "anchors"
    line = f"federation.hooks[0].{option} {str(data)!r}{FOLDER_STRAY}"
    assert_refused_before_torch(tmp_path, ["fit", *args, "--config", str(path)], line, config_file=path)
    assert not (tmp_path / "runs").exists()


def test_the_live_line_names_the_hooks_option(tmp_path):
    """Past the precheck (a hook built in Python), the data source's line names the hook's option, not
    ``data.dataset``."""
    from lightning_fed.datamodules.sources import load_public_records
    from lightning_fed.errors import UserError

    data = _data_file(tmp_path, "notes.txt", "some notes\n")
    option = "federation.hooks: HeldOutRouge.dataset"
    with pytest.raises(UserError) as raised:
        load_public_records(option, str(data), "instruction")
    assert str(raised.value) == f"{option} {str(data)!r}: unsupported file type '.txt'; {SUPPORTED}"


# name -> (file name, its text, the problem said after `federation.hooks[0].dataset '<file>'`)
SHAPES = {
    "csv_numbers": (
        "held.csv",
        "instruction,input,output\nSay one.,,1\nSay two.,,2\n",
        ": field 'output' must be text; row 0 has 1",
    ),
    "json_scalars": (
        "held.json",
        "[1, 2, 3]",
        ": missing field 'instruction' of the instruction records HeldOutRouge reads (columns: text;"
        " map it with federation.hooks[0].field_map)",
    ),
    "jsonl_number": (
        "held.jsonl",
        '{"instruction": "Say hi.", "output": "hi"}\n{"instruction": 3, "output": "x"}\n',
        ": field 'instruction' must be text; line 2 (row 1) has 3",
    ),
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_held_out_rouge_rows_of_the_wrong_shape_are_refused_before_torch(tmp_path, case):
    """Red team B02: a HeldOutRouge ``dataset`` whose rows are no instruction records (a CSV number column
    where text goes, JSON scalars for rows) trained, wrote a run folder, then was refused at the hook's first
    evaluation. Now refused before torch as ``data.dataset`` is, naming the hook's option; no run folder."""
    name, content, problem = SHAPES[case]
    data = _data_file(tmp_path, name, content)
    init_args = {"dataset": str(data), "max_new_tokens": 4, "every_n_rounds": 1, "max_examples": 2}
    held_out = {"class_path": "lightning_fed.evaluation.heldout.HeldOutRouge", "init_args": init_args}
    config = {**HELD_OUT, "federation": {**HELD_OUT["federation"], "hooks": [held_out]}}
    config["trainer"] = {**HELD_OUT["trainer"], "default_root_dir": str(tmp_path / "runs")}
    path = write_config(tmp_path, config, "hr_tiny.yaml")
    line = f"federation.hooks[0].dataset {str(data)!r}{problem}"
    assert_refused_before_torch(tmp_path, ["fit", "--config", "fedit", "--config", str(path)], line, config_file=path)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("rows", "dim", "needed"), [(2, None, 3), (3, 3, 4)])
def test_fedhds_anchors_of_too_few_rows_are_refused_before_torch(tmp_path, rows, dim, needed):
    """Red team B05: FedHDS ``anchors`` holding fewer rows than the anchored frame needs (3, and more than
    ``dim``: the server's PCA) ended with exit 1 at the first selection, after the run folder was written.
    Now refused before torch naming the option and the number needed; no run folder."""
    record = '{"instruction": "Say hi.", "input": "", "output": "hi"}\n'
    data = _data_file(tmp_path, "anchors.jsonl", record * rows)
    config = shipped_config("fedhds_turbo_tiny")
    init_args = config["federation"]["hooks"][0]["init_args"]
    init_args.pop("anchor_args")
    init_args["anchors"] = str(data)
    if dim is not None:
        init_args["dim"] = dim
    config["trainer"]["default_root_dir"] = str(tmp_path / "runs")
    path = write_config(tmp_path, config)
    line = (
        f"federation.hooks[0].anchors {str(data)!r} holds {rows} rows; the anchored frame needs at least"
        f" {needed} (3, and more than federation.hooks[0].dim={dim or 2})"
    )
    assert_refused_before_torch(tmp_path, ["fit", "--config", str(path)], line, config_file=path)
    assert not (tmp_path / "runs").exists()
