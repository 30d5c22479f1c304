"""Runs that are the same run are counted once, with a warning; a group with one seed twice is
pointed out; the table reads as it should ("1 run", seconds per round). Hand-built run folders."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from lightning_fed.report.cli import main as report
from lightning_fed.report.runs import drop_repeats, find_runs
from tests.report.hand_runs import make_run


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "report.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_repeated_run_is_counted_once_and_said_so(tmp_path, capsys):
    first = make_run(tmp_path / "a" / "s0", seed=0, values=(0.5, 1.0))
    again = make_run(tmp_path / "b" / "s0", seed=0, values=(0.5, 1.0))  # same config and seed, other folder
    other = make_run(tmp_path / "a" / "s1", seed=1, values=(0.5, 0.5))
    out = tmp_path / "out"
    assert report([str(first), str(again), str(other), "--out", str(out)]) == 0
    (row,) = _rows(out)
    assert (row["runs"], row["seeds"], row["final_n"]) == ("2", "0,1", "2")
    assert float(row["final_mean"]) == pytest.approx(0.75)  # not (1.0 + 1.0 + 0.5) / 3
    note = f"{again.resolve()} repeats {first.resolve()} (same config and seed 0): counted once"
    captured = capsys.readouterr()
    assert captured.err == f"warning: {note}\n"
    assert f"## Notes\n\n- {note}\n" in (out / "report.md").read_text()
    assert "repeats" not in captured.out  # stdout: the tables only
    assert "counted once" in (out / "report.html").read_text()


def test_runs_differing_only_in_where_they_write_are_the_same_run(tmp_path):
    a = make_run(tmp_path / "a", seed=3, root_dir="runs/x")
    b = make_run(tmp_path / "b", seed=3, root_dir="/elsewhere")
    c = make_run(tmp_path / "c", seed=3, strategy="FedProx")
    d = make_run(tmp_path / "d", seed=4)
    unseeded = [make_run(tmp_path / f"u{i}", seed=False) for i in range(2)]  # each run draws its own seed
    kept, repeats = drop_repeats(find_runs([str(p) for p in (a, b, c, d, *unseeded)]))
    assert [r.path.name for r in kept] == ["a", "c", "d", "u0", "u1"]
    assert [(x.path.name, y.path.name) for x, y in repeats] == [("b", "a")]


def test_a_group_with_one_seed_twice_is_pointed_out(tmp_path, capsys):
    a = make_run(tmp_path / "a", seed=0, strategy="FedAvg")
    b = make_run(tmp_path / "b", seed=0, strategy="FedProx")
    assert report([str(a), str(b), "--by", "partition", "--out", str(tmp_path / "out")]) == 0
    (row,) = _rows(tmp_path / "out")
    assert (row["runs"], row["seeds"]) == ("2", "0,0")
    assert capsys.readouterr().err == (
        f"warning: group 'default': seed 0 twice ({a.resolve()} and {b.resolve()} differ in"
        " federation.strategy.class_path): its ± is not over seeds alone; add the key to --by\n"
    )


def test_unseeded_runs_in_one_group_are_not_pointed_out(tmp_path, capsys):
    runs = [make_run(tmp_path / f"u{i}", seed=False, values=(0.5, 0.5 + i / 4)) for i in range(2)]
    assert report([*map(str, runs), "--out", str(tmp_path / "out")]) == 0
    (row,) = _rows(tmp_path / "out")
    assert row["runs"] == "2" and capsys.readouterr().err == ""


def test_one_run_is_one_run_and_seconds_are_per_round(tmp_path, capsys):
    run = make_run(tmp_path / "s0", values=(0.5, 0.75, 1.0), seconds=2.5)  # 2 rounds of 2.5 s
    assert report([str(run), "--out", str(tmp_path / "out")]) == 0
    md = capsys.readouterr().out
    assert md.startswith("## Table 1: 1 run, pref_acc\n")
    head = md.splitlines()[1].split(" | ")
    assert "s per round" in head and "round s" not in md
    cells = md.splitlines()[3].split(" | ")
    assert cells[head.index("s per round")] == "2.50"  # not the 5.00 s of both rounds
    (row,) = _rows(tmp_path / "out")
    assert float(row["round_seconds_mean"]) == 2.5
