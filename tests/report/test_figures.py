"""The report's figures are drawn, with content: lines in each group's colour, not a blank canvas."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.image import imread

from lightning_fed.report.cli import main as report
from lightning_fed.report.figures import colours

FEDAVG, FEDPROX = "method=DPOModule/FedAvg, partition=default", "method=DPOModule/FedProx, partition=default"
C0, C1 = (to_rgb(colours([FEDAVG, FEDPROX])[g]) for g in (FEDAVG, FEDPROX))  # each group's own colour


def _pixels_of(image: np.ndarray, rgb: tuple[float, float, float], tol: int = 12) -> int:
    rgb_arr = (image[..., :3] * 255).round().astype(int)
    return int((np.abs(rgb_arr - np.array(rgb) * 255).max(-1) <= tol).sum())


@pytest.fixture(scope="module")
def drawn(tiny_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    runs = [str(tiny_runs[k]) for k in ("fedavg/s0", "fedavg/s1", "fedprox/s0")]
    assert report([*runs, "--metric", "loss", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("name", ["metric", "clients", "bytes"])
def test_each_figure_has_both_groups_drawn(drawn, name):
    image = imread(drawn / f"table1_{name}.png")
    assert image.shape[0] > 300 and image.shape[1] > 500
    not_white = (image[..., :3] < 0.95).any(-1).mean()
    assert 0.02 < not_white < 0.6  # axes, labels and data; not empty, not a filled block
    # each group's colour: lines (metric, bytes) or points (clients); FedAvg first, FedProx second
    assert _pixels_of(image, C0) > 40 and _pixels_of(image, C1) > 40


def test_the_metric_figure_has_the_p10_p90_band(drawn):
    image = imread(drawn / "table1_metric.png")
    band = tuple(1 - 0.2 * (1 - c) for c in C0)  # FedAvg's colour at alpha 0.2 over white
    assert _pixels_of(image, band, tol=6) > 200


def test_the_html_page_holds_the_table_and_every_figure_inline(drawn):
    page = (drawn / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 3 and "<table>" in page and "DPOModule/FedProx" in page
    assert [base64.b64decode(i) for i in images] == [
        (drawn / f"table1_{n}.png").read_bytes() for n in ("metric", "clients", "bytes")
    ]
    assert 'src="http' not in page and "<script" not in page  # self-contained
