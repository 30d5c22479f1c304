"""RoundLRSchedule's cosine length ``rounds`` (R) below ``federation.rounds``, run by the CLI:
after R rounds the rate holds the floor ``min_lr`` (cosine annealing without restart; red
team 17 B24: the cosine was evaluated past r = R and the rate climbed back to ``model.lr``)."""

import json
import math

import pytest

from lightning_fed.callbacks.lr_schedule import round_lr
from tests.helpers.cli import lightning_fed


def test_round_lr_holds_the_floor_after_r_rounds():
    # R = 2, lr 5e-3, floor 1e-4: r=0 -> 5e-3; r=1 -> (5e-3 + 1e-4) / 2 = 2.55e-3; r >= 2 -> 1e-4.
    rates = [round_lr(5e-3, r, 2, "cosine", min_lr=1e-4) for r in range(5)]
    assert rates == pytest.approx([5e-3, 2.55e-3, 1e-4, 1e-4, 1e-4])
    assert round_lr(5e-3, 1, 3, "cosine") == pytest.approx(5e-3 * (1 + math.cos(math.pi / 3)) / 2)  # 3.75e-3


def test_fit_with_a_cosine_shorter_than_the_run_stays_at_the_floor(tmp_path):
    config = tmp_path / "lr.yaml"
    hook = {
        "class_path": "lightning_fed.callbacks.RoundLRSchedule",
        "init_args": {"schedule": "cosine", "rounds": 2, "min_lr": 1e-4},
    }
    config.write_text(json.dumps({"federation": {"hooks": [hook]}}))
    proc = lightning_fed(
        "fit", "--config", "configs/tiny.yaml", "--config", str(config),
        f"--trainer.default_root_dir={tmp_path / 'run'}", "--trainer.enable_progress_bar=false",
        "--federation.local_steps=1", "--federation.rounds=4",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    [summary] = (tmp_path / "run").rglob("summary.json")
    # Round 4 (r = 3) trains at the floor 1e-4; before the fix at cos(3 pi / 2): [[0.00255]].
    assert _last_lrs(json.loads(summary.read_text())) == [[pytest.approx(1e-4)]]


def _last_lrs(tree):
    if isinstance(tree, dict):
        if "last_lrs" in tree:
            return tree["last_lrs"]
        for value in tree.values():
            if (found := _last_lrs(value)) is not None:
                return found
    if isinstance(tree, list):
        for value in tree:
            if (found := _last_lrs(value)) is not None:
                return found
    return None
