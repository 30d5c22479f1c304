"""The line ``fit`` ends with: the run folder and what the run learned, from before training to the end.

The evaluation before round 1 (``summary.json`` ``initial``, round 0) is the start point; a run
without it starts from its first evaluated round. Up to three validation metrics are shown, in
this order, each from the start point to the last evaluated round:

* the headline metric: the first of :data:`~lightning_fed.report.table.DEFAULT_METRICS` the
  validation has (``pref_acc``, ``accuracy``, ``rougeL``, ``token_acc``, ``loss``), as
  ``lightning-fed report`` picks it;
* ``reward_acc`` (DPO's implicit reward, the policy's log-ratio to the reference, ranks the
  chosen response first): what a DPO-family objective moves, while ``pref_acc`` (summed
  log-probs) can stay put when the chosen responses are the longer ones;
* ``loss``: the objective itself, which every module logs.

So ``tiny`` closes with ``pref_acc 0.292 -> 1.000, reward_acc 0.500 -> 1.000, loss 0.693 ->
0.268 (round 0 -> round 3)`` (it used to compare round 1, already at 1.000, with round 3), and a
run whose ``pref_acc`` does not move still shows its loss falling. A run that ``trainer.max_time``
stopped early says so last (``; stopped after round 1 of 2: trainer.max_time (00:00:00:01) reached``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lightning_fed.report.table import DEFAULT_METRICS

LEARNING_METRICS = ("reward_acc", "loss")
"""Shown after the headline metric when the validation has them (see the module docstring)."""


def _evaluations(summary: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """``(round, val metrics)`` of every evaluation: round 0 (before training) first when there is one."""
    points = []
    initial = summary.get("initial") or {}
    if isinstance(initial, dict) and initial.get("val"):
        points.append((0, initial["val"]))
    for record in summary.get("rounds") or []:
        if isinstance(record, dict) and record.get("val"):
            points.append((int(record.get("round", 0)), record["val"]))
    return points


def closing_line(
    run_dir: Path, key_file: Path | None = None, completed: int | None = None, stopped: dict[str, Any] | None = None
) -> str:
    """What ``fit`` says last: the run folder and the metrics of the module docstring, first to last evaluation;
    a private run's ``key_file`` (outside the run folder) after them. ``completed``: the rounds the run
    ended with (:func:`_not_this_run`); ``stopped``: why this run stopped where ``summary.json`` (an
    earlier run's, kept) does not say it (a resume whose ``trainer.max_time`` was already spent)."""
    if key_file is not None:
        key = f"; secret key: {key_file} (not in the run folder; deleting it makes the run's randomness unrecoverable)"
        return closing_line(run_dir, completed=completed, stopped=stopped) + key
    summary_file = run_dir / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    if stopped is not None:
        summary = {**summary, "stopped": stopped}
    if line := _not_this_run(run_dir, summary, completed):
        return line
    points = _evaluations(summary)
    last_val = points[-1][1] if points else {}
    headline = next((m for m in DEFAULT_METRICS if m in last_val), None)
    if headline is None:
        none = "no validation metrics (no validation data or no evaluated round)"
        return f"run folder: {run_dir}; {none}{_stopped(summary)}"
    names = list(dict.fromkeys([headline, *(m for m in LEARNING_METRICS if m in last_val)]))
    first_round = next(r for r, val in points if headline in val)
    last_round = points[-1][0]
    first_val = dict(points)[first_round]
    shown = []
    for name in names:
        start = first_val.get(name)
        end = last_val[name]
        shown.append(
            f"{name} {end:.3f}" if first_round == last_round or start is None else f"{name} {start:.3f} -> {end:.3f}"
        )
    rounds = f"round {last_round}" if first_round == last_round else f"round {first_round} -> round {last_round}"
    return f"run folder: {run_dir}; {', '.join(shown)} ({rounds}){_stopped(summary)}"


def _not_this_run(run_dir: Path, summary: dict[str, Any], completed: int | None) -> str | None:
    """The line of a resume that trained no round (its checkpoint had completed ``federation.rounds``)
    in a folder whose ``summary.json`` a later run of it wrote, or ``None``. The seventh outside run
    (a8debca) resumed a round-1 checkpoint with ``--federation.rounds=1`` in a folder the run had
    since taken to round 2: the line said ``(round 0 -> round 2)``, the folder's newer result."""
    records = [r for r in summary.get("rounds") or [] if isinstance(r, dict)]
    last = int(records[-1].get("round", 0)) if records else 0
    if completed is None or not summary or last == completed:
        return None
    return (
        f"run folder: {run_dir}; no round trained: the checkpoint resumed had completed round {completed}"
        f" (the folder's summary.json is of a later run of it, round {last})"
    )


def _stopped(summary: dict[str, Any]) -> str:
    """``; stopped after round 1 of 2: trainer.max_time (...) reached`` for a run that ended early
    with exit 0 (``summary.json``'s ``stopped``, :mod:`lightning_fed.callbacks.time_budget`), else ``""``."""
    stopped = summary.get("stopped")
    if not isinstance(stopped, dict) or "after_round" not in stopped:
        return ""
    return f"; stopped after round {stopped['after_round']} of {stopped.get('rounds')}: {stopped.get('reason')}"
