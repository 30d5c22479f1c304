"""Finished runs read back from their folders, for ``lightning-fed report``.

A run folder is the one that holds ``summary.json`` (the logger's version folder, e.g.
``runs/demo/lightning_logs/version_0``). From it: the resolved config (``summary.json``
``config``), the evaluation before round 1 (``initial``) and after the last round (``final``),
the round lines (``rounds.jsonl``: bytes, seconds, each metric's distribution over clients), the
per-client metrics of every evaluated round (``client_metrics/val/round_<r>.parquet``) and, when
``lightning-fed validate``/``test`` ran, ``validate_results.json``/``test_results.json``.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from lightning_fed.errors import UserError
from lightning_fed.federation.client_metrics import CLIENTS_DIR, ROUNDS_FILE
from lightning_fed.json_lines import numbered_records

SUMMARY = "summary.json"
STAGE_FILES = {"validate": "validate_results.json", "test": "test_results.json"}


def _short(class_path: Any) -> str:
    return str(class_path).rsplit(".", 1)[-1] if class_path else "-"


def config_value(config: Mapping[str, Any], dotted: str) -> Any:
    """``config["a"]["b"]`` for ``"a.b"``; a ``class_path``/``init_args`` level may be left out."""
    node: Any = config
    for key in dotted.split("."):
        if isinstance(node, Mapping) and key not in node and isinstance(node.get("init_args"), Mapping):
            node = node["init_args"]
        if not isinstance(node, Mapping) or key not in node:
            raise KeyError(dotted)
        node = node[key]
    return node


OUTPUT_KEYS = (
    "trainer.default_root_dir",
    "trainer.logger",
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
    "ckpt_path",
    "weights_only",
)
"""Config keys that say where a run writes, how it shows progress or what it resumed from: two runs
that differ only in these (and have the same seed) are the same run."""


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a.b": "<value as JSON>"}`` for every leaf of ``config``, without :data:`OUTPUT_KEYS`."""
    out: dict[str, str] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if dotted in OUTPUT_KEYS:
            continue
        if isinstance(value, Mapping) and value:
            out.update(flat_config(value, dotted + "."))
        else:
            out[dotted] = json.dumps(value, sort_keys=True, default=str)
    return out


def describe_value(value: Any) -> str:
    """A config value in one short line: ``Dirichlet(alpha=0.5)`` for a class with its arguments."""
    if isinstance(value, Mapping) and "class_path" in value:
        args = value.get("init_args") or {}
        inner = ", ".join(f"{k}={describe_value(v)}" for k, v in args.items() if v is not None)
        return f"{_short(value['class_path'])}({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(describe_value(v) for v in value) + "]"
    return "default" if value is None else str(value)


@dataclass
class Run:
    """One finished run: its folder, config and the figures the report reads."""

    path: Path
    summary: dict[str, Any]
    rounds: list[dict[str, Any]]
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """What was found wrong with the run's files and how it was read around (``warning:`` lines)."""

    @property
    def config(self) -> dict[str, Any]:
        return self.summary.get("config") or {}

    @property
    def seed(self) -> Any:
        return self.config.get("seed_everything")

    @property
    def method(self) -> str:
        """The local objective, the server rule and the round hooks: ``DPOModule/FedAvg``."""
        fed = self.config.get("federation") or {}
        hooks = [_short(h.get("class_path")) for h in fed.get("hooks") or [] if isinstance(h, Mapping)]
        model = _short((self.config.get("model") or {}).get("class_path"))
        return "/".join([model, _short((fed.get("strategy") or {}).get("class_path")), *hooks])

    def field(self, name: str) -> str:
        """A grouping field: ``method``, ``partition``, ``strategy``, ``model``, ``seed`` or a dotted config key."""
        fed = self.config.get("federation") or {}
        if name == "method":
            return self.method
        if name == "strategy":
            return describe_value(fed.get("strategy"))
        if name == "model":
            return _short((self.config.get("model") or {}).get("class_path"))
        if name == "partition":
            return describe_value(((self.config.get("data") or {}).get("init_args") or {}).get("partition"))
        if name == "seed":
            return str(self.seed)
        return describe_value(config_value(self.config, name))

    @cached_property
    def flat_config(self) -> dict[str, str]:
        """The config as :func:`flat_config` writes it (computed once)."""
        return flat_config(self.config)

    def same_run_as(self, other: Run) -> bool:
        """Whether ``other`` is this run again: the same recorded config (outside :data:`OUTPUT_KEYS`),
        seed included. Runs without a recorded config or an integer seed (``seed_everything: false``:
        every run draws its own) are never the same."""
        seeded = isinstance(self.seed, int) and not isinstance(self.seed, bool)
        return seeded and bool(self.config) and self.flat_config == other.flat_config

    def config_difference(self, other: Run) -> list[str]:
        """The dotted config keys (outside :data:`OUTPUT_KEYS`) whose values differ, sorted."""
        a, b = self.flat_config, other.flat_config
        return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))

    def client_values(self, metric: str, round_number: int | None = None) -> dict[int, float]:
        """Per-client ``metric`` of an evaluated round: by default the final evaluation's
        (``summary.json`` ``final.val_clients``, else the last evaluated round's Parquet file), else
        the round's Parquet file, from ``summary.json`` when the file is not there."""
        import pyarrow.parquet as pq

        final_clients = (self.summary.get("final") or {}).get("val_clients")
        if round_number is None and isinstance(final_clients, Mapping) and final_clients:
            # the same evaluation as the final column (summary.json), whatever the round files hold
            return {int(c): float(m[metric]) for c, m in final_clients.items() if metric in m}
        rounds = self.evaluated_rounds()
        number = rounds[-1] if round_number is None and rounds else round_number
        path = self.path / CLIENTS_DIR / "val" / f"round_{number:06d}.parquet" if number is not None else None
        if path is not None and path.is_file():
            table = pq.read_table(path)
            if metric in table.column_names:
                rows = zip(table.column("client").to_pylist(), table.column(metric).to_pylist())
                return {int(c): float(v) for c, v in rows if v is not None}
        key = "initial" if number == 0 else "final"
        clients = (self.summary.get(key) or {}).get("val_clients") or {}
        return {int(c): float(m[metric]) for c, m in clients.items() if metric in m}

    def evaluated_rounds(self) -> list[int]:
        """Round numbers with an evaluation: 0 (before round 1) when there is one, then each evaluated round."""
        found = [0] if (self.summary.get("initial") or {}).get("val") else []
        return found + [r["round"] for r in self.rounds if r.get("val")]

    def round_metric(self, metric: str, stat: str = "") -> dict[int, float]:
        """``{round: value}`` of ``val[metric]`` (``stat`` ``"client_p10"`` etc. for its distribution)."""
        key = f"{metric}_{stat}" if stat else metric
        out = {}
        initial = (self.summary.get("initial") or {}).get("val") or {}
        if key in initial:
            out[0] = float(initial[key])
        out.update({int(r["round"]): float(r["val"][key]) for r in self.rounds if key in (r.get("val") or {})})
        return out

    def metrics(self) -> list[str]:
        """The metrics of the final evaluation (``summary.json`` ``final.val``), without their distributions."""
        val = (self.summary.get("final") or {}).get("val") or {}
        return sorted(k for k in val if "_client_" not in k)

    def withheld(self) -> bool:
        """Whether the run's validation was withheld: a private run (``summary.json`` ``privacy.enabled``)
        without ``federation.privacy.report_validation`` evaluates nothing it may report (privacy.md)."""
        privacy = self.summary.get("privacy")
        if not (isinstance(privacy, Mapping) and privacy.get("enabled") is True):
            return False
        try:
            asked = config_value(self.config, "federation.privacy")
        except KeyError:
            asked = None
        return not (isinstance(asked, Mapping) and asked.get("report_validation") is True)

    def no_metric_reason(self) -> str:
        """Why the run has no final evaluation to report, in words for its ``summary.json``."""
        if self.withheld():
            return (
                "no final evaluation: a private run withholds its validation"
                " (federation.privacy.report_validation: true reports the means over clients)"
            )
        return "no final evaluation (interrupted before a round was evaluated?)"

    def epsilon(self) -> float | None:
        """The largest privacy ``epsilon`` (or ``max_epsilon``) reported anywhere in ``summary.json``
        outside its config, ``None`` when the run reports none."""
        found = [v for k, v in _walk({k: v for k, v in self.summary.items() if k != "config"}) if "epsilon" in k]
        return max(found) if found else None


def _walk(node: Any, key: str = "") -> Iterable[tuple[str, float]]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from _walk(v, str(k))
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v, key)
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield key, float(node)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: not a readable JSON file ({type(err).__name__})") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise UserError(f"{path}: not a readable YAML file ({type(err).__name__})") from None
    return loaded if isinstance(loaded, dict) else {}


def _read_rounds(path: Path) -> list[dict[str, Any]]:
    """The round records of ``rounds.jsonl``, one JSON object per line (blank lines skipped)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not a readable text file ({type(err).__name__})") from None
    rounds = []
    damaged = "is not JSON (a truncated or damaged file)"
    for number, record in numbered_records(lines, lambda n: UserError(f"{path}: line {n} {damaged}")):
        if not isinstance(record, dict) or not isinstance(record.get("round"), int):
            raise UserError(f"{path}: line {number} is not a round record (a JSON object with a round number)")
        rounds.append(record)
    return rounds


def load_run(folder: Path) -> Run:
    """Read the run in ``folder`` (the folder of its ``summary.json``)."""
    summary = _read_json(folder / SUMMARY)
    if not isinstance(summary, dict) or "rounds" not in summary:
        raise UserError(f"{folder / SUMMARY}: not a lightning-fed summary (no rounds)")
    if not isinstance(summary.get("config"), dict):  # a run whose config was not recorded (Flower's server)
        saved = folder / "config.yaml"
        summary["config"] = _read_yaml(saved) if saved.is_file() else {}
    rounds_file = folder / ROUNDS_FILE
    recorded = [r for r in summary.get("rounds") or [] if isinstance(r, dict) and isinstance(r.get("round"), int)]
    notes = []
    rounds = _read_rounds(rounds_file) if rounds_file.is_file() else recorded
    if len(rounds) < len(recorded):  # emptied or cut after the run ended: its columns would mix rounds
        notes.append(
            f"{rounds_file}: holds {len(rounds)} of the {len(recorded)} rounds {SUMMARY} records;"
            f" the round figures are read from {SUMMARY}"
        )
        rounds = recorded
    stages = {name: _read_json(folder / f) for name, f in STAGE_FILES.items() if (folder / f).is_file()}
    return Run(folder, summary, rounds, stages, notes)


def find_runs(patterns: list[str], skipped: list[str] | None = None) -> list[Run]:
    """The runs named by ``patterns``: run folders, folders holding runs (searched below), globs.

    Args:
        patterns: Run folders, folders of runs, globs.
        skipped: When given, a run found by a glob or below a folder that cannot be reported (no
            ``summary.json``, a damaged file, no final evaluation: an interrupted run) is left out
            and why is appended here, instead of failing the whole report. A run folder named
            on its own is always read or refused.

    Raises:
        UserError: a pattern that matches nothing, a folder with no ``summary.json`` under it, a
            run named on its own that cannot be read, or no run left to report.
    """
    folders: dict[Path, bool] = {}  # folder -> may be left out
    for pattern in patterns:
        magic = glob.has_magic(pattern)
        matches = sorted(Path(p) for p in glob.glob(pattern)) if magic else [Path(pattern)]
        matches = [m for m in matches if m.exists()]
        if not matches:
            raise UserError(f"RUN {pattern!r}: no such run folder")
        for match in matches:
            if match.is_file():
                match = match.parent if match.name == SUMMARY else match
            direct = (match / SUMMARY).is_file()
            found = [match] if direct else sorted(p.parent for p in match.rglob(SUMMARY))
            if not found:
                if magic and skipped is not None and len(matches) > 1:
                    skipped.append(f"{match}: no {SUMMARY} in it or below it (not a finished run): left out")
                    continue
                raise UserError(f"RUN {str(match)!r}: no {SUMMARY} in it or below it (not a finished run)")
            for folder in found:
                key = folder.resolve()
                folders[key] = folders.get(key, True) and skipped is not None and (magic or not direct)
    runs = []
    for folder, optional in folders.items():
        try:
            run = load_run(folder)
            if optional and not run.metrics():
                raise UserError(f"{folder / SUMMARY}: {run.no_metric_reason()}")
        except UserError as err:
            if not optional:
                raise
            skipped.append(f"{err}: left out")  # type: ignore[union-attr]  # optional implies a list
            continue
        runs.append(run)
    if not runs:
        raise UserError(f"RUN {' '.join(patterns)}: no finished run to report ({len(skipped or [])} left out)")
    return runs


def drop_repeats(runs: list[Run]) -> tuple[list[Run], list[tuple[Run, Run]]]:
    """``runs`` with every repeat of an earlier run left out (the same config and seed: averaging
    both would count one seed twice), and the pairs ``(repeat, the run it repeats)``."""
    kept: list[Run] = []
    repeats: list[tuple[Run, Run]] = []
    for run in runs:
        first = next((k for k in kept if k.same_run_as(run)), None)
        if first is None:
            kept.append(run)
        else:
            repeats.append((run, first))
    return kept, repeats
