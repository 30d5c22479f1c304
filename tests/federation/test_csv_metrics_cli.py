"""A resumed run logged with ``CSVLogger`` continues its ``metrics.csv`` (federation/csv_metrics.py).

Lightning's CSV writer deletes ``metrics.csv`` of a folder that is not empty as soon as it is
created: an outside tester's resume of a CSV-logged run, stopped by SIGTERM before its first round
or failing, left the folder without the earlier rounds' rows. Seen failing on 91746a4 (the resumed
run's file held its own 4 rows, the first run's 5 gone).
"""

from __future__ import annotations

import csv

from tests.helpers.cli import lightning_fed

CSV = "--trainer.logger={class_path: lightning.pytorch.loggers.CSVLogger, init_args: {save_dir: runs}}"
TINY = [
    "--config",
    "configs/tiny.yaml",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--federation.local_steps=1",
]


def _rows(path):
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def test_a_resume_keeps_the_earlier_rounds_rows(tmp_path):
    logger = CSV.replace("save_dir: runs", f"save_dir: {tmp_path / 'runs'}")
    first = lightning_fed("fit", *TINY, "--federation.rounds=1", logger)
    assert first.returncode == 0, first.stderr[-3000:]
    folder = tmp_path / "runs" / "lightning_logs" / "version_0"
    before = _rows(folder / "metrics.csv")
    assert before, "the first run logged no metrics"

    resumed = lightning_fed(
        "fit", *TINY, "--federation.rounds=2", logger, f"--ckpt_path={folder / 'checkpoints' / 'last.ckpt'}"
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = _rows(folder / "metrics.csv")
    assert len(after) > len(before)
    kept = [{k: v for k, v in row.items() if k in before[0]} for row in after[: len(before)]]
    assert kept == before  # the earlier rows, under a header that may have grown
