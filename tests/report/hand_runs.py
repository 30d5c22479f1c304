"""Run folders written by hand for the report tests: a ``summary.json`` and a ``rounds.jsonl`` holding
exactly the figures a test needs (no training, no Parquet files: per-client values come from
``summary.json``'s ``val_clients``)."""

from __future__ import annotations

import json
from pathlib import Path


def make_run(
    folder: Path,
    *,
    seed: int | bool = 0,
    strategy: str = "FedAvg",
    values: tuple[float, ...] = (0.5, 0.75, 1.0),
    clients: dict[int, float] | None = None,
    up: int = 1000,
    down: int = 1000,
    seconds: float = 2.0,
    metric: str = "pref_acc",
    root_dir: str | None = None,
) -> Path:
    """A finished run of ``len(values) - 1`` rounds: ``values[0]`` before round 1, ``values[r]`` after
    round ``r``, each round ``up``/``down`` bytes and ``seconds`` seconds; ``clients``: the final
    per-client values (default: every client at the final value)."""
    folder.mkdir(parents=True)
    clients = {c: values[-1] for c in range(4)} if clients is None else clients
    config = {
        "seed_everything": seed,
        "trainer": {"default_root_dir": root_dir or str(folder), "enable_progress_bar": False},
        "model": {"class_path": "lightning_fed.modules.dpo.DPOModule", "init_args": {"beta": 0.1}},
        "data": {"class_path": "lightning_fed.datamodules.Planted", "init_args": {"partition": None}},
        "federation": {"strategy": {"class_path": f"lightning_fed.strategies.{strategy}"}, "rounds": len(values) - 1},
        "ckpt_path": None,
    }

    def val(v: float) -> dict[str, float]:
        return {metric: v, f"{metric}_client_p10": v - 0.1, f"{metric}_client_p90": v + 0.1}

    rounds = [
        {"round": r, "up_bytes": up, "down_bytes": down, "seconds": seconds, "val": val(v)}
        for r, v in enumerate(values[1:], start=1)
    ]
    summary = {
        "config": config,
        "initial": {"round": 0, "val": val(values[0])},
        "rounds": rounds,
        "final": {"val": {metric: values[-1]}, "val_clients": {str(c): {metric: v} for c, v in clients.items()}},
        "total_up_bytes": up * len(rounds),
        "total_down_bytes": down * len(rounds),
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rounds))
    return folder
