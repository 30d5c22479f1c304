"""``lightning-fed test`` without ``data.test_dataset`` refused before torch (issue 41, item 1), and
``validate``/``test`` whose set holds no example at all refused (issue 41 H3).

On baaf8e7 ``test --config tiny`` was refused only after the imports and the model's build (exit 2,
13.1 s of CPU); the child here, whose ``import torch`` fails, reached it. The line is the data
module's own (:data:`lightning_fed.stage_sets.NO_TEST_SET`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import REACHED_TORCH, lightning_fed, lightning_fed_without_torch
from tests.helpers.tiny_run import CHECKPOINT, tiny_run

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


LONG = " ".join(["word"] * 400)
"""A prompt and responses far past configs/tiny.yaml's ``data.max_length`` (160 tokens)."""


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    """The run folder of one round of configs/tiny.yaml (shared: never written into by a refused run)."""
    return tiny_run(tmp_path_factory) / CHECKPOINT.parents[1]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("stage", "given", "on_overflow", "why"),
    [
        ("test", "test_dataset", "drop", "all 4 dropped to fit data.max_length=160 (data.on_overflow='drop')"),
        (
            "test",
            "test_dataset",
            "truncate",
            "all 4 dropped: fewer than data.min_prompt_length=16 of their prompt tokens fit data.max_length=160"
            " (set data.max_completion_length or raise data.max_length)",
        ),
        ("validate", "val_dataset", "drop", "all 4 dropped to fit data.max_length=160 (data.on_overflow='drop')"),
    ],
    ids=["test_drop", "test_truncate", "validate_drop"],
)
def test_an_evaluation_set_left_with_no_example_is_refused(tmp_path, earlier, stage, given, on_overflow, why):
    """Issue 41 H3: on 08c1cba ``test`` of a set whose every row is longer than ``data.max_length`` (each
    dropped under ``on_overflow`` ``drop`` or ``truncate``) exited 0 with only a warning, no
    ``test_results.json`` and nothing on stdout (``validate`` likewise), where ``fit`` and ``validate``
    refuse a client left without training examples (exit 2). Now exit 2, one line naming the option and the
    file; the run folder as it was."""
    rows = tmp_path / "long.jsonl"
    rows.write_text(
        "".join(json.dumps({"prompt": LONG, "chosen": LONG, "rejected": f"{LONG} x"}) + "\n" for _ in "abcd")
    )
    before = _files(earlier)
    proc = lightning_fed(
        stage,
        "--config",
        str(earlier / "config.yaml"),
        "--trainer.enable_progress_bar=false",
        f"--data.init_args.{given}={rows}",
        f"--data.init_args.on_overflow={on_overflow}",
        f"--ckpt_path={earlier / 'checkpoints' / 'last.ckpt'}",
        cwd=tmp_path,
    )
    name = given.split("_")[0]
    line = f"error: data.{given} {str(rows)!r}: no {name} example is left for {stage} to score: {why}\n"
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line, "")
    assert _files(earlier) == before  # no results file, no events file


def test_validate_with_no_validation_example_is_refused(tmp_path, earlier):
    """``validate`` with ``data.val_fraction=0`` (no ``val_dataset``) scored nothing, exit 0, on 08c1cba."""
    before = _files(earlier)
    proc = lightning_fed(
        "validate",
        "--config",
        str(earlier / "config.yaml"),
        "--trainer.enable_progress_bar=false",
        "--data.init_args.val_fraction=0",
        f"--ckpt_path={earlier / 'checkpoints' / 'last.ckpt'}",
        cwd=tmp_path,
    )
    line = (
        "error: data.val_fraction=0.0 leaves no client a validation example, so validate has nothing to score;"
        " raise data.val_fraction or give data.val_dataset=<file>\n"
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line, "")
    assert _files(earlier) == before


@pytest.mark.parametrize(
    ("stage", "given", "plan", "picked"),
    [
        ("test", "test_dataset", ["--federation.eval_clients=panel", "--federation.eval_panel_size=1"], "[1]"),
        ("validate", "val_dataset", ["--federation.eval_clients=sampled"], "[1, 3]"),
    ],
    ids=["test_panel", "validate_sampled"],
)
def test_an_evaluation_plan_that_picks_only_clients_without_examples_is_refused(
    tmp_path, earlier, stage, given, plan, picked
):
    """Issue 41: ``test`` with ``federation.eval_clients=panel`` of one client (or ``validate`` with
    ``sampled``) whose clients hold none of the set's rows, while client 0 holds one, scored nothing: on
    a2f8dcc exit 0, nothing on stdout or stderr, no results file, an empty events file in the run folder.
    Now exit 2, one line naming the options, the clients and the set; the run folder as it was."""
    rows = tmp_path / "one.jsonl"
    rows.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')  # one row: it goes to client 0
    before = _files(earlier)
    proc = lightning_fed(
        stage,
        "--config",
        str(earlier / "config.yaml"),
        "--trainer.enable_progress_bar=false",
        f"--data.init_args.{given}={rows}",
        *plan,
        f"--ckpt_path={earlier / 'checkpoints' / 'last.ckpt'}",
        cwd=tmp_path,
    )
    options = plan[0].removeprefix("--").replace("=", "='", 1) + "'"
    options += " (federation.eval_panel_size=1)" if "panel" in options else " (round 1's clients)"
    name = given.split("_")[0]
    line = (
        f"error: {options} picks clients {picked}, none of which has a {name} example, so {stage} has nothing"
        f" to score (data.{given} {str(rows)!r} gives examples to clients [0]); set federation.eval_clients=all\n"
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (2, line, "")
    assert _files(earlier) == before  # no results file, no events file


NO_VALIDATION = (
    "data.val_fraction=0.0 leaves no client a validation example, so validate has nothing to score;"
    " raise data.val_fraction or give data.val_dataset=<file>"
)


@pytest.mark.parametrize(
    ("given", "files", "source"),
    [
        (["--data.val_fraction=0"], {}, None),
        (["--data.init_args.val_fraction=0.0"], {}, None),
        (["--config", "v.yaml"], {"v.yaml": "data:\n  init_args:\n    val_fraction: 0\n"}, "v.yaml"),
        (["--config", "v.yaml"], {"v.yaml": "data:\n  init_args: {val_fraction: '0'}\n"}, "v.yaml"),
    ],
    ids=["option", "init_args_option", "file", "quoted_in_file"],
)
def test_validate_with_val_fraction_0_is_refused_before_torch(tmp_path, given, files, source):
    """Red team 15 M9: on f6ad729 ``validate --data.val_fraction=0`` (no ``val_dataset``) was refused with
    this line only after torch and the model's build (6.75 s of CPU), though the config alone shows it:
    a fraction of 0 holds out no row. Now before torch, naming the file that set it."""
    proc, cwd = _run(tmp_path, "validate", "--config", "tiny", *given, files=files)
    assert REACHED_TORCH not in proc.stderr
    where = f"config {source!r}: " if source else ""
    assert (proc.returncode, proc.stderr) == (2, f"error: {where}{NO_VALIDATION}\n")
    assert sorted(p.name for p in cwd.iterdir()) == sorted(files)


def test_val_fraction_0_with_a_validation_set_or_in_fit_goes_on(tmp_path):
    """A ``val_dataset`` is scored instead of the held-out rows; ``fit`` trains with none held out."""
    files = {"v.jsonl": '{"prompt": "p", "chosen": "a", "rejected": "b"}\n'}
    for args in (
        ["validate", "--config", "tiny", "--data.val_fraction=0", "--data.init_args.val_dataset=v.jsonl"],
        ["validate", "--config", "tiny", "--data.val_fraction=0.01"],
        ["fit", "--config", "tiny", "--data.val_fraction=0"],
    ):
        proc, _ = _run(tmp_path, *args, files=files)
        assert REACHED_TORCH in proc.stderr, (args, proc.stderr)
