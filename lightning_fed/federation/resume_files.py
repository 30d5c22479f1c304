"""The run folder's files a resume reads or reports, checked before Lightning is imported.

A resume from ``<run>/checkpoints/<file>`` reads the run's round history from ``<run>/rounds.jsonl``
(:class:`~lightning_fed.federation.round_history.RoundHistory`) and, when it trains no round, reports
the folder's ``summary.json`` as it is (:func:`~lightning_fed.report.closing.closing_line`). Both were
read only after a round was trained or Lightning had run (red team 17 B18, B19: a bare
``JSONDecodeError``, exit 1, a damaged ``rounds.jsonl`` after ``last.ckpt`` was replaced). Here they are
read first, by :mod:`~lightning_fed.federation.early_check`, and a damaged one is one line naming the
file, nothing written. Imports nothing heavy.
"""

from __future__ import annotations

import json

from lightning_fed.federation.client_metrics import ROUNDS_FILE
from lightning_fed.federation.version_folder import checkpoint_run


def history_problem(path: str) -> str | None:
    """The line refusing a resume from ``path`` whose run folder's ``rounds.jsonl`` holds a damaged record
    before its last line, or ``None``. The resume reads the run's round history from that file
    (:class:`~lightning_fed.federation.round_history.RoundHistory`): red team 17 B18, a line 3 of 7 that was
    no JSON was read only for ``summary.json``, after a round was trained and ``last.ckpt`` and
    ``config.yaml`` replaced (a bare ``JSONDecodeError``, exit 1). The last line is not checked: one a
    crash left half-written is dropped by the resume (a record past the checkpoint's rounds, or one
    without its newline), as it was. A checkpoint outside a run folder (its history is read from the
    folder stored in it) is left to the live run."""
    folder = checkpoint_run(path)
    file = folder / ROUNDS_FILE if folder is not None else None
    try:
        data = file.read_bytes() if file is not None and file.is_file() else b""
    except OSError:
        return None  # the live run says what it is
    lines = data.removesuffix(b"\n").split(b"\n")
    reads = "the resume reads the run's round history from it"
    for number, line in enumerate(lines[:-1], start=1):  # every line before the last (complete or not)
        try:
            record = json.loads(line)
        except ValueError:  # JSONDecodeError, UnicodeDecodeError
            problem = f"line {number} is not JSON (a damaged round record; {reads})"
        else:
            if isinstance(record, dict) and isinstance(record.get("round"), int):
                continue
            problem = f"line {number} is not a round record (a JSON object with a round number; {reads})"
        return f"ckpt_path {path!r}: {file}: {problem}: restore the file from a copy of the run folder"
    return None


def summary_problem(path: str, counts: tuple[int, int] | None) -> str | None:
    """The line refusing a resume that trains no round (its checkpoint's run completed ``federation.rounds``)
    from a run folder whose ``summary.json`` is damaged, or ``None``. Such a resume writes no
    ``summary.json``: it reports the folder's, kept as it is (docs/get-started/outputs.md), and read it only
    at its end, after Lightning (red team 17 B19: a bare ``JSONDecodeError``, exit 1). A resume that trains
    a round writes the file anew, so it is not refused for it. ``counts``: the rounds the checkpoint's run
    completed and this run's ``federation.rounds`` (``None``: unknown here)."""
    folder = checkpoint_run(path)
    if counts is None or counts[0] != counts[1] or folder is None or not (file := folder / "summary.json").is_file():
        return None
    try:
        summary = json.loads(file.read_bytes())
    except OSError:
        return None  # the live run says what it is
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        damaged = "is not JSON (a damaged file)"
    else:
        if isinstance(summary, dict) and isinstance(summary.get("rounds", []), list):
            return None
        damaged = "is not a run summary (a JSON object with a list of rounds)"
    done = counts[0]
    return (
        f"ckpt_path {path!r}: its run completed {done} rounds, federation.rounds={done} trains none, and the"
        f" result such a resume reports, {file}, {damaged}: restore it from a copy of the run folder, or"
        f" resume with federation.rounds > {done} (a resume that trains writes it anew)"
    )
