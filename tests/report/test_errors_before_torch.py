"""``lightning-fed report``'s argument errors come before torch, Lightning or pandas is imported.

Before (issue 41): every ``report`` error, even ``report nosuchdir``, came after Lightning was
imported (7-9 s of CPU): reading a run's files imported ``federation.round_history`` for the
name of ``rounds.jsonl``, and with it Lightning. Each case here runs as a process with torch,
Lightning, transformers, PEFT and pandas made unimportable (:func:`tests.helpers.cli.heavy_blocked_env`):
its exact stderr shows that none of them was needed, and the runs and the working folder are
left as they were.
"""

from __future__ import annotations

import pytest

from lightning_fed.errors import help_tip
from tests.helpers.cli import heavy_blocked_env, lightning_fed
from tests.helpers.files import assert_unchanged, snapshot
from tests.report.hand_runs import make_run


@pytest.mark.parametrize(
    "args, message",
    [
        (["nosuchdir"], "RUN 'nosuchdir': no such run folder"),
        (["nomatch*/x"], "RUN 'nomatch*/x': no such run folder"),
        (["empty"], "RUN 'empty': no summary.json in it or below it (not a finished run)"),
        (["runs/a", "--out", "afile/x"], "--out 'afile/x': '{cwd}/afile' is a file, not a folder"),
        (["runs/a", "--out", "afile"], "--out 'afile': a file, not a folder"),
        (["runs/a", "--out", "/proc/x"], "--out '/proc/x': cannot write into '/proc' (No such file or directory)"),
        (["runs/a", "--by", ","], "--by ',': name at least one field (method, partition, strategy, model, seed)"),
        (
            ["runs/a", "--by", "federation.nope"],
            "--by 'federation.nope': not in the config of {cwd}/runs/a (fields: method, partition, strategy, model,"
            " seed or a dotted config key)",
        ),
        (
            ["runs/*", "--metric", "rouge"],
            "--metric 'rouge': not in the final evaluation of {cwd}/runs/a (it has: ['pref_acc'])",
        ),
    ],
    ids=[
        "no_folder",
        "empty_glob",
        "not_a_run",
        "out_under_a_file",
        "out_a_file",
        "out_in_proc",
        "by_empty",
        "by_unknown",
        "metric_unknown",
    ],
)
def test_report_argument_error_is_one_line_before_torch(tmp_path, args, message):
    cwd = tmp_path / "cwd"
    (cwd / "empty").mkdir(parents=True)
    (cwd / "afile").write_text("")
    make_run(cwd / "runs" / "a", seed=0)
    make_run(cwd / "runs" / "b", seed=1)
    before = snapshot(cwd)
    proc = lightning_fed("report", *args, cwd=cwd, env=heavy_blocked_env(tmp_path / "blocked"))
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {message.format(cwd=cwd)}\n")
    assert_unchanged(before, cwd)


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "the following arguments are required: RUN_OR_GLOB"),
        (["runs/a", "--met", "x"], "unrecognized arguments: --met x; did you mean --metric?"),
    ],
    ids=["no_run", "abbreviated"],
)
def test_report_s_parser_errors_are_fit_s_form_before_torch(tmp_path, args, message):
    """``error: <line>`` and the tip naming ``report`` (on 0be92cf: ``error: lightning-fed report: ...``
    and the --debug hint, whose traceback says nothing of a parse)."""
    proc = lightning_fed("report", *args, cwd=tmp_path, env=heavy_blocked_env(tmp_path / "blocked"))
    tip = help_tip("lightning-fed report")
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {message}\n{tip}\n")


def test_report_of_finished_runs_needs_no_torch(tmp_path):
    """The report itself reads JSON (and Parquet with pyarrow, not here) and draws with matplotlib."""
    make_run(tmp_path / "runs" / "a", seed=0)
    make_run(tmp_path / "runs" / "b", seed=1)
    proc = lightning_fed("report", "runs/*", "--out", "out", cwd=tmp_path, env=heavy_blocked_env(tmp_path / "blocked"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"report.md", "report.csv", "report.html"} <= {p.name for p in (tmp_path / "out").iterdir()}
