"""The optimizer and scheduler states of a checkpoint against the run's own optimizers
(:mod:`lightning_fed.federation.optimizer_check`), on a toy module: what a run wrote is accepted,
each setting that is not the configured one is refused naming its path, and a learning rate is
free (finite, >= 0) only where the run sets it itself before each client's steps."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from lightning_fed.callbacks.lr_schedule import RoundLRSchedule
from lightning_fed.federation.optimizer_check import optimizer_problem


class Toy(torch.nn.Module):
    """Two parameters, AdamW at lr 0.01, optionally a StepLR."""

    def __init__(self, scheduler: bool = False) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Parameter(torch.ones(2, 3)), torch.nn.Parameter(torch.ones(3))
        self.scheduler = scheduler

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=0.01)
        if not self.scheduler:
            return opt
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)}


def _written(module: Toy, steps: int = 3) -> dict:
    """The optimizer (and scheduler) states after ``steps`` steps, as a checkpoint holds them."""
    made = module.configure_optimizers()
    opt = made["optimizer"] if isinstance(made, dict) else made
    for _ in range(steps):
        for p in module.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
        if isinstance(made, dict):
            made["lr_scheduler"].step()
    schedulers = [made["lr_scheduler"].state_dict()] if isinstance(made, dict) else []
    return {"optimizer_states": [opt.state_dict()], "lr_schedulers": schedulers}


def _group(ckpt: dict) -> dict:
    return ckpt["optimizer_states"][0]["param_groups"][0]


def test_what_a_run_wrote_is_accepted():
    assert optimizer_problem(_written(Toy()), Toy()) is None
    assert optimizer_problem(_written(Toy(scheduler=True)), Toy(scheduler=True)) is None


def _state(index: int, **entry):
    return lambda c: c["optimizer_states"][0]["state"][index].update(entry)


def _setting(**settings):
    return lambda c: _group(c).update(settings)


CONFIGURED = "this run's configured optimizer has"


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_setting(lr=1e9), ("param_groups[0].lr", f"is 1000000000.0, {CONFIGURED} 0.01")),
        (_setting(lr=float("nan")), ("param_groups[0].lr", f"is nan, {CONFIGURED} 0.01")),
        (_setting(eps=1.0), ("param_groups[0].eps", f"is 1.0, {CONFIGURED} 1e-08")),
        (_setting(amsgrad=True), ("param_groups[0].amsgrad", f"is True, {CONFIGURED} False")),
        (_setting(junk=1), ("param_groups[0].junk", "is not a setting of this run's optimizer")),
        (_setting(params=[1, 0]), ("param_groups[0].params", f"is [1, 0], {CONFIGURED} [0, 1]")),
        (_state(1, exp_avg=torch.zeros(2, 3)), ("state[1].exp_avg", "has shape (2, 3), its parameter's is (3,)")),
        (_state(0, exp_avg=torch.full((2, 3), float("inf"))), ("state[0].exp_avg", "has NaN or infinite values")),
        (_state(0, step=torch.tensor(-2.0)), ("state[0].step", "is -2.0, expected a step count >= 0")),
        (_state(0, momentum_buffer=torch.zeros(2, 3)), ("state[0].momentum_buffer", "is not kept by this run's")),
        (lambda c: c["optimizer_states"][0]["state"].update({2: {}}), ("state", "entry 2 names no parameter")),
    ],
)
def test_a_setting_or_state_the_run_did_not_write_is_refused(change, problem):
    ckpt = _written(Toy())
    change(ckpt)
    where, what = optimizer_problem(ckpt, Toy())
    assert where == f"optimizer_states[0].{problem[0]}" and what.startswith(problem[1]), (where, what)


def test_a_rate_the_run_sets_itself_is_free_but_finite():
    """With a round schedule the checkpoint holds the last round's rate (its base is the hook's state)."""
    scheduled = SimpleNamespace(hooks=[RoundLRSchedule()])
    ckpt = _written(Toy())
    _group(ckpt)["lr"] = 0.0025  # the cosine's rate of a later round
    assert optimizer_problem(ckpt, Toy()) is not None
    assert optimizer_problem(ckpt, Toy(), scheduled) is None
    for bad in (float("nan"), -1.0, "x"):
        _group(ckpt)["lr"] = bad
        where, what = optimizer_problem(ckpt, Toy(), scheduled)
        assert where == "optimizer_states[0].param_groups[0].lr" and "expected a finite learning rate >= 0" in what


@pytest.mark.parametrize(
    ("key", "value", "what"),
    [
        ("gamma", 0.9, "is 0.9, this run's scheduler has 0.5"),
        ("last_epoch", -5, "is -5, expected a count >= 0"),
        ("_last_lr", [float("nan")], "is [nan], expected 1 finite learning rates >= 0"),
        ("junk", 1, "is not a field of this run's StepLR"),
    ],
)
def test_a_scheduler_field_the_run_did_not_write_is_refused(key, value, what):
    ckpt = _written(Toy(scheduler=True))
    ckpt["lr_schedulers"][0][key] = copy.deepcopy(value)
    where, problem = optimizer_problem(ckpt, Toy(scheduler=True))
    assert where == f"lr_schedulers[0].{key}" and problem.startswith(what), (where, problem)
