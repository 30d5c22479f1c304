"""A bug in a check made before torch is reported as a bug, not read as "the late check's to say".

Each case plants a ``NameError`` (what red team 15 M1 found: a name ``ByKey``'s CSV reader no longer
had, swallowed by a broad ``except``, so a CSV with too few keys was refused only after torch) in
one function the precheck calls inside a ``try``, raised only when called from that check (so each
``except`` is tested on its own), through a ``sitecustomize`` that also makes ``import torch`` fail
(:data:`~tests.helpers.cli.NO_TORCH`). The process ends as any bug ends it: exit 1, ``error:
NameError: ...`` and the ``--debug`` hint, before torch, nothing written; with ``--debug``, the
traceback naming the check.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from lightning_fed.errors import HINT
from tests.helpers.cli import ENV, NO_TORCH, REACHED_TORCH, ROOT, run_process
from tests.helpers.refusals import shipped_config, write_config

BUG = """
import importlib
import sys


def _plant(module, name, caller):
    owner = importlib.import_module(module)
    real = getattr(owner, name)

    def planted(*args, **kwargs):
        if sys._getframe(1).f_code.co_name == caller:
            raise NameError("name 'precheck_bug' is not defined")
        return real(*args, **kwargs)

    setattr(owner, name, planted)


_plant({module!r}, {name!r}, {caller!r})
"""
"""Appended to :data:`~tests.helpers.cli.NO_TORCH` (``.format(module=, name=, caller=)``): ``module.name``
raises ``NameError`` when called from the function named ``caller``, and works as before otherwise."""

LINE = f"error: NameError: name 'precheck_bug' is not defined\n{HINT}\n"
ROWS = [{"question": f"q{i}", "preferred": "a", "other": "b", "user": user} for i, user in enumerate("aabb")]


def _data_file(folder: Path, suffix: str) -> Path:
    """Four rows, two users, as ``suffix`` (``.jsonl``, ``.csv``, ``.parquet``)."""
    path = folder / f"train{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    elif suffix == ".csv":
        path.write_text("\n".join([",".join(ROWS[0]), *(",".join(row.values()) for row in ROWS)]) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(ROWS), path)
    return path


def _data_config(folder: Path, suffix: str, partition: dict) -> list[str]:
    """``fit --config FILE`` over the tiny config with ``data.dataset`` a local file of ``suffix``."""
    config = shipped_config("tiny")
    data = config["data"]["init_args"]
    data.pop("synthetic_args")
    data.update(
        dataset=str(_data_file(folder, suffix)),
        field_map={"prompt": "question", "chosen": "preferred", "rejected": "other"},
        partition=partition,
        num_clients=2,
        batch_size=2,
        val_fraction=0.0,
    )
    config["trainer"]["default_root_dir"] = "runs/tiny"
    return ["fit", "--config", str(write_config(folder, config))]


def _tiny(folder: Path) -> list[str]:
    """``fit --config FILE``: the tiny config as a file."""
    return ["fit", "--config", str(write_config(folder, shipped_config("tiny")))]


BY_KEY = {"class_path": "lightning_fed.datamodules.ByKey", "init_args": {"key": "user"}}
SORTED = {"class_path": "lightning_fed.datamodules.SortedShards", "init_args": {"score": "user"}}

CASES = {
    # (module, function, the check calling it) -> the arguments (given the temporary folder)
    ("lightning_fed.data_columns", "csv_cells", "_key_column"): lambda d: _data_config(d, ".csv", BY_KEY),
    ("lightning_fed.data_columns", "json_rows", "blank_row_problem"): lambda d: _data_config(d, ".jsonl", BY_KEY),
    ("lightning_fed.data_columns", "json_rows", "_is_text"): lambda d: _data_config(d, ".jsonl", SORTED),
    ("lightning_fed.data_cross_rules", "json_rows", "local_columns"): lambda d: _data_config(d, ".jsonl", BY_KEY),
    ("pyarrow.parquet", "read_metadata", "parquet_problem"): lambda d: _data_config(d, ".parquet", BY_KEY),
    ("lightning_fed.yaml_reading", "load", "value_of"): lambda d: ["fit", "--config", "tiny", "--seed_everything", "3"],
    ("lightning_fed.yaml_reading", "load", "_inline"): lambda d: ["fit", "--config", "no_such.yaml"],
    ("lightning_fed.config_values", "load", "apply_arguments"): lambda d: _tiny(d),
    ("lightning_fed.run_config", "federation_problems", "problems"): lambda d: ["plan", "--config", "tiny"],
}


def _run(tmp_path: Path, planted: tuple[str, str, str], args: list[str]):
    hook = tmp_path / "hook"
    hook.mkdir()
    module, name, caller = planted
    (hook / "sitecustomize.py").write_text(NO_TORCH + BUG.format(module=module, name=name, caller=caller))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"}
    proc = run_process([sys.executable, "-m", "lightning_fed", *args], cwd=cwd, env=env)
    assert REACHED_TORCH not in proc.stderr
    assert list(cwd.iterdir()) == []
    return proc


@pytest.mark.parametrize("planted", list(CASES), ids=lambda p: f"{p[2]}-{p[1]}")
def test_a_bug_in_a_precheck_reader_is_reported_as_a_bug_before_torch(tmp_path, planted):
    proc = _run(tmp_path, planted, CASES[planted](tmp_path))
    assert (proc.returncode, proc.stderr) == (1, LINE), proc.stderr


def test_with_debug_the_bug_s_traceback_names_the_check(tmp_path):
    planted = ("lightning_fed.data_columns", "csv_cells", "_key_column")
    proc = _run(tmp_path, planted, [*CASES[planted](tmp_path), "--debug"])
    assert proc.returncode == 1
    assert proc.stderr.startswith("Traceback (most recent call last):")
    assert "in _key_column\n" in proc.stderr
    assert proc.stderr.endswith("error: NameError: name 'precheck_bug' is not defined\n")
