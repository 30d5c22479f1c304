"""``lightning-fed report``: finished runs compared in tables (Markdown, CSV), figures and one HTML page."""

from lightning_fed.report.runs import Run, find_runs, load_run
from lightning_fed.report.table import Row, group_rows, markdown

__all__ = ["Run", "Row", "find_runs", "group_rows", "load_run", "markdown"]
