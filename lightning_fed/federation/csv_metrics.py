"""A CSV logger's ``metrics.csv`` continued by a resumed run, never deleted.

Lightning's CSV writer (``lightning.fabric.loggers.csv_logs._ExperimentWriter``), created in a
folder that is not empty, warns "Previous log files in this directory will be deleted" and
deletes ``metrics.csv`` at once: a resume of a run logged with ``CSVLogger`` lost the earlier
rounds' rows, even when the resume then failed or was stopped before its first round (an outside
tester's hash of the folder showed it). A run continues in its checkpoint's folder
(docs/guides/resume-signals.md), and a new run's folder already holds its ``.lock``
(:mod:`lightning_fed.federation.version_folder`), so the CLI gives every CSV logger it places
this writer instead: it appends to the file, reading the columns already there first (Lightning
rewrites the file with a wider header when a new metric appears, keeping every row).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from lightning_fed.federation.run_folder import own_files


class ContinuedCSVWriter(ExperimentWriter):
    """:class:`~lightning.pytorch.loggers.csv_logs.ExperimentWriter` that keeps ``metrics.csv``.

    Args:
        log_dir: The run folder (``<root>/<name>/version_N``), local.
    """

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir=log_dir)
        # appended (metrics.csv) and rewritten (hparams.yaml, at each save) in place: not through a
        # hard-linked copy's files (cp -al), whose original would change with them (red team 16 B07)
        own_files(Path(self.metrics_file_path))
        own_files(Path(self.log_dir, self.NAME_HPARAMS_FILE))
        if os.path.isfile(self.metrics_file_path):  # its header: later rows are appended under it
            with open(self.metrics_file_path, newline="") as file:
                self.metrics_keys = list(csv.DictReader(file).fieldnames or [])

    def _check_log_dir_exists(self) -> None:
        """Lightning's deletes ``metrics.csv`` of a folder that is not empty; nothing is deleted here."""
