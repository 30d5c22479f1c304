"""What the report's figures show, read from the matplotlib objects: the spread over seeds, both
traffic directions when they are equal, a colour per group that stays, sane limits for a series
that does not vary. Hand-built run folders."""

from __future__ import annotations

import statistics

import pytest
from matplotlib.colors import to_hex

from lightning_fed.report.figures import clients_final, colours, cumulative_bytes, metric_per_round
from lightning_fed.report.runs import find_runs
from lightning_fed.report.table import group_rows
from tests.report.hand_runs import make_run


def _rows(tmp_path, specs, by="method"):
    folders = [make_run(tmp_path / name, **kw) for name, kw in specs.items()]
    return group_rows(find_runs([str(f) for f in folders]), by.split(","), "pref_acc")


def test_the_metric_figure_has_error_bars_over_seeds(tmp_path):
    rows = _rows(
        tmp_path,
        {
            "s0": {"seed": 0, "values": (0.5, 0.6, 0.9)},
            "s1": {"seed": 1, "values": (0.5, 0.8, 0.7)},
            "prox": {"seed": 0, "strategy": "FedProx", "values": (0.5, 0.6, 0.7)},
        },
    )
    ax = metric_per_round(rows).axes[0]
    (bars,) = ax.containers  # FedAvg only: FedProx has one seed
    line, _, (segments,) = bars
    assert list(line.get_ydata()) == pytest.approx([0.5, 0.7, 0.8])
    spans = [y for seg in segments.get_segments() for y in (seg[0][1], seg[1][1])]
    sd = [0.0, statistics.stdev([0.6, 0.8]), statistics.stdev([0.9, 0.7])]
    assert spans == pytest.approx([y for m, s in zip([0.5, 0.7, 0.8], sd) for y in (m - s, m + s)])
    assert "sd over seeds" in ax.get_title()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["DPOModule/FedAvg (n=2)", "DPOModule/FedProx (n=1)"]


def test_equal_up_and_down_traffic_are_both_visible(tmp_path):
    rows = _rows(tmp_path, {"s0": {"up": 2_000_000, "down": 2_000_000, "values": (0.5, 0.6, 0.7)}})
    up, down = cumulative_bytes(rows).axes
    assert [ax.get_title() for ax in (up, down)] == ["up: cumulative, all clients", "down: cumulative, all clients"]
    for ax in (up, down):
        (line,) = ax.get_lines()
        assert list(line.get_ydata()) == pytest.approx([2.0, 4.0]) and line.get_visible()


def test_a_group_keeps_its_colour_whatever_the_other_groups(tmp_path):
    one = _rows(tmp_path / "1", {"a": {"strategy": "FedAvg"}, "b": {"strategy": "FedProx"}})
    two = _rows(tmp_path / "2", {"c": {"strategy": "FedAdam"}, "a": {"strategy": "FedAvg"}})
    colour_of = {}
    for rows in (one, two):
        for line in metric_per_round(rows).axes[0].get_lines():
            label = line.get_label().rsplit(" (n=", 1)[0]
            colour_of.setdefault(label, set()).add(to_hex(line.get_color()))
    assert colour_of["DPOModule/FedAvg"] == {colours(["DPOModule/FedAvg"])["DPOModule/FedAvg"]}
    assert all(len(c) == 1 for c in colour_of.values())


def test_groups_of_one_report_never_share_a_colour_while_the_palette_lasts():
    labels = [f"method=M{i}, partition=default" for i in range(10)]
    assert len(set(colours(labels).values())) == 10
    assert colours(labels[:3]) == colours(list(reversed(labels[:3])))  # order of the groups does not matter


def test_a_series_that_does_not_vary_gets_an_axis_from_zero(tmp_path):
    rows = _rows(tmp_path, {"s0": {"values": (1.0, 1.0, 1.0)}})
    rows[0].runs[0].rounds = [{**r, "val": {"pref_acc": 1.0}} for r in rows[0].runs[0].rounds]  # no band
    rows[0].runs[0].summary["initial"]["val"] = {"pref_acc": 1.0}
    assert metric_per_round(rows).axes[0].get_ylim() == pytest.approx((0.0, 1.05))
    assert clients_final(rows).axes[0].get_ylim() == pytest.approx((0.0, 1.05))
    free = _rows(tmp_path / "free", {"s0": {"up": 0, "down": 0}})
    assert cumulative_bytes(free).axes[0].get_ylim() == pytest.approx((0.0, 1.0))
    varying = _rows(tmp_path / "varying", {"s0": {"values": (0.2, 0.4, 0.9)}})
    low, high = metric_per_round(varying).axes[0].get_ylim()
    assert 0.0 < low < 0.1 and 1.0 < high < 1.1  # matplotlib's own limits: the band 0.1-1.0 and a margin
