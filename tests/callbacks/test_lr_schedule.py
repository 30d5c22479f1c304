"""Per-round client learning rates: hand values, what the optimizers see, resume."""

import math

import pytest
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.callbacks.lr_schedule import RoundLRSchedule, round_lr
from lightning_fed.federation import RoundHook
from lightning_fed.strategies import FedAvg
from tests.helpers.runs import fit, preference_data, tiny_dpo


def test_round_lr_by_hand():
    # OpenFedLLM's cosine, R = 4: r=0 -> lr; r=2 -> the midpoint; never reaches min_lr.
    assert round_lr(1e-3, 0, 4, "cosine", min_lr=1e-5) == pytest.approx(1e-3)
    assert round_lr(1e-3, 1, 4, "cosine", min_lr=1e-5) == pytest.approx(1e-5 + 0.99e-3 * (1 + math.sqrt(0.5)) / 2)
    assert round_lr(1e-3, 2, 4, "cosine", min_lr=1e-5) == pytest.approx(0.505e-3)
    assert round_lr(1e-3, 3, 4, "cosine") == pytest.approx(1e-3 * (1 - math.sqrt(0.5)) / 2)
    # step: halve every 2 rounds
    assert [round_lr(0.1, r, 6, "step", step_size=2, gamma=0.5) for r in range(6)] == pytest.approx(
        [0.1, 0.1, 0.05, 0.05, 0.025, 0.025]
    )
    assert [round_lr(0.1, r, 3, "constant") for r in range(3)] == [0.1, 0.1, 0.1]


def test_bad_options_are_named_together():
    with pytest.raises(ValueError) as info:
        RoundLRSchedule(schedule="linear", gamma=0, step_size=0)
    msg = str(info.value)
    assert "federation.hooks[].schedule must be one of" in msg and "got 'linear'" in msg
    assert "federation.hooks[].gamma must be in (0, 1], got 0" in msg
    assert "federation.hooks[].step_size must be >= 1, got 0" in msg


class LRSeen(RoundHook):
    """Records the learning rate each client trained with, per round."""

    def __init__(self):
        self.seen = []

    def on_client_end(self, turn, trainer, module, update):
        self.seen.append((trainer.current_epoch, trainer.optimizers[0].param_groups[0]["lr"]))


def run(tmp_path, name, rounds, ckpt_path=None):
    seen = LRSeen()
    loop = FederatedLoop(
        rounds=rounds,
        clients_per_round=1,
        local_steps=1,
        seed=0,
        strategy=FedAvg(),
        hooks=[RoundLRSchedule("cosine", min_lr=1e-4, rounds=3), seen],
    )
    data = preference_data(num_clients=2, per_client=8, max_length=96, val_fraction=0.25)
    fit(tiny_dpo(lr=5e-3), data, loop, str(tmp_path / name), ckpt_path=ckpt_path)
    return loop, seen.seen


def test_schedule_reaches_the_optimizer_and_survives_resume(tmp_path):
    straight, seen = run(tmp_path, "straight", 3)
    expected = [round_lr(5e-3, r, 3, "cosine", min_lr=1e-4) for r in range(3)]
    assert seen == [(r, pytest.approx(expected[r])) for r in range(3)]
    run(tmp_path, "first", 2)  # stopped after round 2 of 3
    resumed, seen_resumed = run(tmp_path, "resumed", 3, ckpt_path=str(tmp_path / "first" / "ckpt" / "last.ckpt"))
    # The restored optimizer holds round 2's (scaled) rate; the schedule keeps its base and goes on.
    assert seen_resumed == [(2, pytest.approx(expected[2]))]
    for k, v in straight.server.global_state.items():
        torch.testing.assert_close(resumed.server.global_state[k], v, rtol=1e-5, atol=1e-7, msg=k)


def test_schedule_runs_under_flower_as_in_process(tmp_path):
    """The Flower server has no optimizers: the schedule is client work, and a Flower run with it
    reaches the in-process global state (cosine over 2 rounds: round 2 trains at min_lr)."""
    import yaml

    from tests.helpers.flower_sim import assert_same_state, run_in_process, run_on_grid

    config = yaml.safe_load(open("configs/tiny.yaml"))
    hook = {"class_path": "lightning_fed.callbacks.RoundLRSchedule", "init_args": {"min_lr": 1e-4}}
    config["federation"].update(rounds=2, hooks=[hook])
    path = tmp_path / "lr_schedule.yaml"
    path.write_text(yaml.safe_dump(config))
    local = run_in_process(str(path), tmp_path / "local", [])
    server, _ = run_on_grid(str(path), tmp_path / "flower", [])
    assert_same_state(local.server.global_state, server.server.global_state)
    assert local.server.hooks[0].current == [[pytest.approx(round_lr(0.005, 1, 2, "cosine", min_lr=1e-4))]]
