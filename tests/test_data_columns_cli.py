"""``data.group_key``, an evaluation set's client column and ``SortedShards``' score refused before torch
is imported, in one line naming the option and its value (red team 8, rows 14 and 15;
:mod:`lightning_fed.data_columns`).

On 52f9c49: ``--data.init_args.group_key=grp`` on a planted set ran to the end with exit 0 (p13); on a
local file it was refused after the imports, 12 s of CPU, in two lines (p14); a ``test_dataset``
without the ``ByKey`` column got ``no column 'user' to assign rows to clients by`` and the ``--debug``
hint (p11); ``SortedShards(score: group)`` got ``partition SortedShards(score='group'): column
'group' must be numeric, got object``, naming no option (p12, p09). The children cannot import torch
(``tests/helpers/cli.py``); each runs in an empty folder, which stays empty but for its data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lightning_fed.data_columns import PLANTED_NUMERIC
from lightning_fed.shipped_configs import resolve_config
from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch
from tests.helpers.refusals import assert_refused_before_torch, shipped_config, write_config

PREFERENCE_COLUMNS = "prompt, chosen, rejected, client, group"


def _own_data(cwd: Path) -> dict:
    """own_data.yaml with its example files copied into ``cwd`` (paths relative to it)."""
    config = yaml.safe_load(Path(resolve_config("own_data")).read_text(encoding="utf-8"))
    source = Path(resolve_config("own_data")).parent
    for key in ("dataset", "test_dataset"):
        relative = config["data"]["init_args"][key]
        found = next(p for p in (source / relative, source.parent / relative) if p.is_file())
        (cwd / relative).parent.mkdir(parents=True, exist_ok=True)
        (cwd / relative).write_bytes(found.read_bytes())
    return config


def _fit(tmp_path: Path, cwd: Path, config: dict, *args: str):
    path = tmp_path / "my.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path, lightning_fed_without_torch("fit", "--config", str(path), *args, cwd=cwd, hook=tmp_path / "hook")


def _cwd(tmp_path: Path) -> Path:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return cwd


def test_a_group_key_a_planted_set_lacks_is_refused_before_torch(tmp_path):
    path = write_config(tmp_path, shipped_config("tiny"), "my.yaml")
    line = (
        f"data.group_key 'grp': data.dataset 'synthetic:preferences' has no such column (columns: {PREFERENCE_COLUMNS})"
    )
    assert_refused_before_torch(tmp_path, ["fit", "--config", str(path), "--data.init_args.group_key=grp"], line)


def test_a_group_key_the_test_file_lacks_is_refused_before_torch_naming_the_file(tmp_path):
    cwd = _cwd(tmp_path)
    config = _own_data(cwd)
    config["data"]["init_args"]["group_key"] = "usr"
    path, proc = _fit(tmp_path, cwd, config)
    test_file = config["data"]["init_args"]["test_dataset"]
    columns = "user, prompt, chosen, rejected"
    line = f"data.group_key 'usr': data.test_dataset {test_file!r} has no such column (columns: {columns})"
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(path)!r}: {line}\n")


def test_a_test_file_without_the_bykey_column_is_refused_before_torch(tmp_path):
    cwd = _cwd(tmp_path)
    config = _own_data(cwd)
    rows = [json.loads(x) for x in (cwd / config["data"]["init_args"]["test_dataset"]).read_text().splitlines() if x]
    (cwd / "t.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "user"}) + "\n" for r in rows))
    _, proc = _fit(tmp_path, cwd, config, "--data.init_args.test_dataset=t.jsonl")
    line = (
        "data.test_dataset 't.jsonl' has no column 'user' (data.partition.key) to assign its rows to clients by"
        " (columns: question, preferred, other)"  # the file's own columns, not field_map's (red team 16 B4)
    )
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")


@pytest.mark.parametrize(("shipped", "score"), [("tiny", "group"), ("own_data", "prompt")])
def test_sorted_shards_by_a_text_column_is_refused_before_torch(tmp_path, shipped, score):
    """``prompt`` of own_data is its file's ``question`` (field_map)."""
    cwd = _cwd(tmp_path)
    config = _own_data(cwd) if shipped == "own_data" else yaml.safe_load(Path(resolve_config(shipped)).read_text())
    partition = f"--data.init_args.partition={{class_path: SortedShards, init_args: {{score: {score}}}}}"
    _, proc = _fit(tmp_path, cwd, config, partition)
    dataset = config["data"]["init_args"]["dataset"]
    line = (
        f"data.partition.score {score!r}: data.dataset {dataset!r} holds text in that column;"
        " SortedShards sorts the rows by a numeric column"
    )
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")


def test_sorted_shards_by_a_numeric_column_and_a_group_key_it_has_go_on(tmp_path):
    """``client`` is numeric and ``group`` a column of the planted set: the child reaches torch."""
    cwd = _cwd(tmp_path)
    config = yaml.safe_load(Path(resolve_config("tiny")).read_text(encoding="utf-8"))
    partition = "--data.init_args.partition={class_path: SortedShards, init_args: {score: client}}"
    _, proc = _fit(tmp_path, cwd, config, partition, "--data.init_args.group_key=group")
    assert REACHED_TORCH in proc.stderr


def test_the_planted_numeric_columns_are_the_planted_sets_numeric_columns():
    import numpy as np

    from lightning_fed.datamodules.synthetic import SYNTHETIC

    for name, generator in SYNTHETIC.items():
        ds = generator(num_clients=2, examples_per_client=2, seed=0)
        numeric = {c for c in ds.column_names if np.asarray(ds[c]).dtype.kind in "biuf"}
        assert numeric == PLANTED_NUMERIC & set(ds.column_names), name


@pytest.mark.parametrize("value", [3, ["a"], {"a": 1}, True], ids=["number", "list", "mapping", "bool"])
def test_a_field_that_is_not_text_is_refused_before_torch_naming_its_line(tmp_path, value):
    """Issue 41: ``"preferred": ["a"]`` in own_data's file (``chosen`` after ``data.field_map``) was refused
    after the imports (10-15 s of CPU, no line); ``datasets`` reads the column as JSON values and the data
    module refuses it, so the precheck says the same, before torch, with the line, and the user's column
    beside the field it is read as (LOW: the field alone named no column of the file)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    config = _own_data(cwd)
    train = cwd / config["data"]["init_args"]["dataset"]
    lines = train.read_text(encoding="utf-8").splitlines()
    lines[2] = json.dumps({**json.loads(lines[2]), "preferred": value})
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = write_config(tmp_path, config)
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=cwd, hook=tmp_path / "hook")
    dataset = config["data"]["init_args"]["dataset"]
    line = f"data.dataset {dataset!r}: field 'chosen' (column 'preferred') must be text; line 3 (row 2) has {value!r}"
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(path)!r}: {line}\n")


@pytest.mark.parametrize("option", ["dataset", "test_dataset"])
def test_a_field_map_column_the_file_lacks_is_refused_before_torch_naming_the_key(tmp_path, option):
    """Issue 41: ``data.field_map: {rejected: other}`` on a file without ``other`` was refused after the
    imports (10-15 s of CPU), as ``data.field_map: 'rejected' maps to column ...``; now before torch, naming
    ``data.field_map.rejected``, the column, the option and the file."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    config = _own_data(cwd)
    name = config["data"]["init_args"][option]
    rows = [json.loads(line) for line in (cwd / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        row["worse"] = row.pop("other")
    (cwd / name).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    path = write_config(tmp_path, config)
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=cwd, hook=tmp_path / "hook")
    columns = ", ".join(rows[0])
    line = f"data.field_map.rejected: column 'other' is not in data.{option} {name!r} (columns: {columns})"
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(path)!r}: {line}\n")
