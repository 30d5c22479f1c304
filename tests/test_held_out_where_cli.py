"""``HeldOutRouge``'s ``where`` naming a column its local ``dataset`` lacks, or keeping none of its rows,
is refused before torch in one line naming ``federation.hooks[i].where``, ``federation.hooks[i].dataset``
and the config file (lightning_fed/held_out_rules.py).

On f6ad729 both trained a round over ``fedit`` (36 s wall, 9 s CPU, a ``version_0`` folder written),
then exited 1 with ``error: `where`: '.../held.jsonl' has no column 'topic' (columns: ...)`` (or
``held-out set '...': no rows match where={...}``) and the ``--debug`` hint, naming no option.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_fed.held_out_rules import where_problem
from tests.helpers.cli import lightning_fed
from tests.helpers.refusals import assert_refused_before_torch, write_config
from tests.test_hook_public_set_paths_cli import HELD_OUT

ROWS = [{"prompt": f"say {i}", "input": "", "output": str(i), "category": "summary"} for i in range(4)]
FIELD_MAP = {"instruction": "prompt"}


def _held_out(folder: Path, suffix: str) -> Path:
    path = folder / f"held{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    else:
        path.write_text("\n".join([",".join(ROWS[0]), *(",".join(row.values()) for row in ROWS)]) + "\n")
    return path


def _config(tmp_path: Path, data: Path, where: dict) -> Path:
    hook = {
        "class_path": "lightning_fed.evaluation.heldout.HeldOutRouge",
        "init_args": {"dataset": str(data), "field_map": FIELD_MAP, "where": where, "max_new_tokens": 4},
    }
    config = {**HELD_OUT, "federation": {**HELD_OUT["federation"], "hooks": [hook]}}
    config["trainer"] = {**HELD_OUT["trainer"], "default_root_dir": str(tmp_path / "runs")}
    return write_config(tmp_path, config)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_where_column_the_held_out_set_lacks_is_one_line_before_torch(tmp_path, suffix):
    data = _held_out(tmp_path, suffix)
    path = _config(tmp_path, data, {"topic": "summary"})
    line = (
        f"federation.hooks[0].where: federation.hooks[0].dataset {str(data)!r} has no column 'topic'"
        " (columns: instruction, input, output, category)"
    )
    assert_refused_before_torch(tmp_path, ["fit", "--config", "fedit", "--config", str(path)], line, config_file=path)


def test_a_where_no_row_passes_is_one_line_before_torch(tmp_path):
    data = _held_out(tmp_path, ".jsonl")
    path = _config(tmp_path, data, {"category": "dialogue"})
    line = (
        f"federation.hooks[0].where: no row of federation.hooks[0].dataset {str(data)!r}"
        " matches where={'category': 'dialogue'}"
    )
    assert_refused_before_torch(tmp_path, ["fit", "--config", "fedit", "--config", str(path)], line, config_file=path)


def test_a_where_some_rows_pass_or_not_certain_here_is_left_to_the_run(tmp_path):
    data = str(_held_out(tmp_path, ".jsonl"))
    given = {"dataset": data, "field_map": FIELD_MAP}
    assert where_problem(0, {**given, "where": {"category": "summary", "instruction": "say 2"}}) is None
    assert where_problem(0, {**given, "where": {"category": 3}}) is None  # not text: the reader's typing
    assert where_problem(0, {"dataset": "synthetic:instructions", "where": {"family": "x"}}) is None


def _parquet(folder: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = folder / "held.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    return path


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_a_where_no_row_of_a_parquet_or_csv_set_passes_is_one_line_before_torch(tmp_path, suffix):
    """Red team 17 B9: on a41cfb8 a Parquet or CSV held-out set's ``where: {category: zzz}`` trained a round,
    then exited 1 (a ``version_0`` folder left) with ``error: federation.hooks: HeldOutRouge.where: no row of
    federation.hooks: HeldOutRouge.dataset 'held.parquet' matches where={'category': 'zzz'}``."""
    data = _parquet(tmp_path) if suffix == ".parquet" else _held_out(tmp_path, suffix)
    path = _config(tmp_path, data, {"category": "zzz"})
    hook = "federation.hooks[0]"
    line = f"{hook}.where: no row of {hook}.dataset {str(data)!r} matches where={{'category': 'zzz'}}"
    assert_refused_before_torch(tmp_path, ["fit", "--config", "fedit", "--config", str(path)], line, config_file=path)


def test_a_where_column_a_synthetic_set_lacks_is_one_line_before_the_run_folder(tmp_path):
    """Red team 17 B9: a set not read before torch (here ``synthetic:instructions``) is read when the run is
    bound (``check_server``), before anything is written. On a41cfb8 it exited 1 after round 0's evaluation (a
    ``version_0`` folder left), naming ``federation.hooks: HeldOutRouge.where`` and ``...HeldOutRouge.dataset``
    with the ``--debug`` hint."""
    hook = {
        "class_path": "lightning_fed.evaluation.heldout.HeldOutRouge",
        "init_args": {"dataset": "synthetic:instructions", "where": {"categry": "a"}, "max_new_tokens": 4},
    }
    config = {**HELD_OUT, "federation": {**HELD_OUT["federation"], "hooks": [hook]}}
    config["trainer"] = {**HELD_OUT["trainer"], "default_root_dir": str(tmp_path / "runs")}
    path = write_config(tmp_path, config)
    proc = lightning_fed("fit", "--config", "fedit", "--config", str(path), cwd=tmp_path)
    line = (
        "federation.hooks[0].where: federation.hooks[0].dataset 'synthetic:instructions' has no column 'categry'"
        " (columns: instruction, input, output, client, family)"
    )
    assert (proc.returncode, proc.stderr.splitlines()[-1:]) == (2, [f"error: {line}"])
    assert not (tmp_path / "runs").exists()


def _numbered(folder: Path) -> Path:
    path = folder / "held.jsonl"
    path.write_text("".join(json.dumps({**row, "n": i % 2}) + "\n" for i, row in enumerate(ROWS)), encoding="utf-8")
    return path


def test_a_where_text_no_integer_of_a_number_column_is_one_line_before_torch(tmp_path):
    """Red team 17 B10: ``where``'s values are text; a column of integers is matched by their text (``n: '1'``),
    and a value no integer is written as is refused before torch. On 880fb11 ``where: {n: 'one'}`` reached torch
    (then exit 2 after the imports: no row matches)."""
    data = _numbered(tmp_path)
    path = _config(tmp_path, data, {"n": "one"})
    line = (
        f"federation.hooks[0].where.n: column 'n' of federation.hooks[0].dataset {str(data)!r} holds integers,"
        " matched by their text ('0', '1', '-2'...); got 'one'"
    )
    assert_refused_before_torch(tmp_path, ["fit", "--config", "fedit", "--config", str(path)], line, config_file=path)


def test_a_where_on_a_number_column_matches_its_text(tmp_path):
    given = {"dataset": str(_numbered(tmp_path)), "field_map": FIELD_MAP}
    assert where_problem(0, {**given, "where": {"n": "1"}}) is None
    assert "no row of" in where_problem(0, {**given, "where": {"n": "7"}})
    assert "got '01'" in where_problem(0, {**given, "where": {"n": "01"}})
