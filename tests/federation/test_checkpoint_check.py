"""The checkpoint checker the CLI calls (:func:`check_checkpoint`), in-process, against every part
of a checkpoint and byte-level damage (issue 41 item 2): each corruption is refused as a
:class:`CheckpointError` naming the file, or accepted only when what the resumed run would use (the
weights, each optimizer's settings as Lightning loads them, the strategy's state as the strategy
loads it) is that of the checkpoint it came from. Never another exception (that would be exit 1)."""

from __future__ import annotations

import copy
import io
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightning_fed import run_factory
from lightning_fed.errors import CheckpointError
from lightning_fed.federation.checkpoint_check import check_checkpoint
from lightning_fed.federation.checkpoint_io import read_checkpoint
from lightning_fed.federation.optimizer_check import configured, same
from lightning_fed.run_parser import parse_run

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)
STRATEGY = "--federation.strategy=FedAdam"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(checkpoint bytes, module, server) of one round of configs/tiny.yaml with FedAdam (a strategy with state)."""
    root = tmp_path_factory.mktemp("trained")
    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", "configs/tiny.yaml"]
    cmd += [f"--trainer.default_root_dir={root}", "--trainer.enable_progress_bar=false"]
    cmd += ["--federation.rounds=1", "--federation.local_steps=1", "--trainer.logger=false", STRATEGY]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = next(root.rglob("last.ckpt")).read_bytes()
    parsed = parse_run(str(ROOT / "configs" / "tiny.yaml"), STRATEGY)
    return data, parsed.module, run_factory.server_round(parsed.run)


PARTS = [
    ("federation",),
    ("federation", "report"),
    ("federation", "report", "rounds"),
    ("federation", "report", "initial_eval"),
    ("federation", "strategy"),
    ("federation", "hooks"),
    ("federation", "privacy"),
    ("federation", "global_state"),
    ("federation", "global_state", "*"),
    ("state_dict", "*"),
    ("optimizer_states",),
    ("optimizer_states", 0, "state"),
    ("optimizer_states", 0, "param_groups", 0, "lr"),
    ("optimizer_states", 0, "param_groups", 0, "betas"),
    ("optimizer_states", 0, "param_groups", 0, "eps"),
    ("optimizer_states", 0, "param_groups", 0, "weight_decay"),
    ("optimizer_states", 0, "param_groups", 0, "params"),
    ("optimizer_states", 0, "param_groups", 0, "junk"),
    ("optimizer_states", 0, "param_groups"),
    ("optimizer_states", 0, "state", 0),
    ("optimizer_states", 0, "state", 0, "exp_avg"),
    ("federation", "strategy", "m"),
    ("federation", "strategy", "m", "*"),
    ("federation", "strategy", "step"),
    ("federation", "strategy", "junk"),
    ("lr_schedulers",),
    ("callbacks", "FederatedLoop"),
    ("callbacks", "FederatedLoop", "seed"),
    ("global_step",),
    ("epoch",),
    ("loops",),
    ("loops", "fit_loop", "epoch_progress", "current", "processed"),
    # issue 41 (the checkpoint part): a NaN in the DPO reference cache and a negative counter were accepted
    ("reference_cache", "values"),
    ("reference_cache", "keys"),
    ("reference_cache", "dtype"),
    ("loops", "fit_loop", "epoch_loop.state_dict", "_batches_that_stepped"),
    ("loops", "fit_loop", "epoch_progress", "total", "ready"),
    ("loops", "fit_loop", "epoch_loop.batch_progress", "current", "completed"),
    ("loops", "fit_loop", "epoch_loop.automatic_optimization.optim_progress", "optimizer", "step", "total", "ready"),
    ("loops", "validate_loop", "batch_progress", "total", "processed"),
    ("federation", "privacy", "rounds_accounted"),
]
VALUES = [
    "DELETE",
    None,
    -1,
    10**9,
    "x",
    [],
    {},
    [{}],
    {"junk": 1},
    float("nan"),
    torch.zeros(3),
    torch.full((4, 32), float("nan")),
    torch.full((4, 32), 3e38),
    {0: {"exp_avg": torch.zeros(5)}},
    1e300,
    -1.0,
    1.5,
    (0.5, 0.5),
    (0.9,),
    {"exp_avg": torch.zeros(4, 32), "junk": torch.zeros(4, 32)},
    {"model.x": torch.zeros(2)},
    torch.full((6, 2), float("nan")),
    torch.full((6, 2), float("-inf")),
    -(10**6),
    True,
]


def _mutate(ckpt: dict, part: tuple, value) -> None:
    target = ckpt
    for key in part[:-1]:
        target = target[key]
    key = part[-1]
    if key == "*":
        key = sorted(target)[0]
    if value == "DELETE" if isinstance(value, str) else False:
        target.pop(key, None) if isinstance(target, dict) else target.clear()
    else:
        target[key] = value


def _weights(ckpt: dict) -> dict:
    return {**ckpt["state_dict"], **{f"g/{k}": v for k, v in ckpt["federation"]["global_state"].items()}}


def _flat(value, prefix: str) -> dict:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}/{key}").items()}
    return {prefix: value}


def _used(ckpt: dict, module, server) -> dict:
    """What a resume from ``ckpt`` would use: the weights, each optimizer's settings as Lightning
    loads them into this run's optimizer, the strategy's state as this run's strategy loads it."""
    used = _weights(ckpt)
    optimizers, _ = configured(module)
    for i, (opt, state) in enumerate(zip(optimizers, ckpt["optimizer_states"])):
        opt.load_state_dict(copy.deepcopy(state))
        for j, group in enumerate(opt.param_groups):
            used.update({f"opt{i}/{j}/{k}": v for k, v in group.items() if k != "params"})
    strategy = copy.deepcopy(server.strategy)
    strategy.load_state_dict(copy.deepcopy(ckpt["federation"]["strategy"]))
    return {**used, **_flat(strategy.state_dict(), "strategy")}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)


def _check(path: Path, module, server) -> dict:
    ckpt = read_checkpoint(path, stage="fit")
    check_checkpoint(path, ckpt, module, server)
    return ckpt


@given(part=st.sampled_from(PARTS), value=st.sampled_from(VALUES))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_corrupted_part_is_refused_or_leaves_what_the_run_uses(tmp_path_factory, run, part, value):
    data, module, server = run
    original = torch.load(io.BytesIO(data), weights_only=True)
    ckpt = copy.deepcopy(original)
    try:
        _mutate(ckpt, part, value)
    except (KeyError, IndexError, TypeError):
        return  # the part is not there to corrupt (e.g. an empty state)
    path = tmp_path_factory.mktemp("part") / "last.ckpt"
    torch.save(ckpt, path)
    try:
        accepted = _check(path, module, server)
    except CheckpointError as err:
        assert str(err).startswith(f"ckpt_path {str(path)!r}: ") and "\n" not in str(err)
        return
    assert _same(_used(accepted, module, server), _used(original, module, server)), (part, value)
    assert _whole_counts(accepted["loops"]), (part, value)  # Lightning resumes its loops from them
    cache = accepted["reference_cache"]["values"]
    assert bool(torch.isfinite(cache).all()), (part, value)  # served as reference log-probabilities


def _whole_counts(loops) -> bool:
    """Every number in Lightning's loop state a whole number >= 0 (flags aside)."""
    if isinstance(loops, dict):
        return all(_whole_counts(v) for v in loops.values())
    if isinstance(loops, bool) or loops is None or isinstance(loops, str):
        return True
    return isinstance(loops, int) and loops >= 0


@given(cut=st.floats(0.0, 0.999), flips=st.lists(st.tuples(st.floats(0.0, 0.999), st.integers(1, 255)), max_size=3))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_byte_damage_is_refused_or_read_as_a_checkpoint_that_fits(tmp_path_factory, run, cut, flips):
    data, module, server = run
    damaged = bytearray(data)
    for where, mask in flips:
        damaged[int(where * len(damaged))] ^= mask
    if not flips:
        damaged = damaged[: int(cut * len(damaged))]
    path = tmp_path_factory.mktemp("bytes") / "last.ckpt"
    path.write_bytes(bytes(damaged))
    try:
        accepted = _check(path, module, server)
    except CheckpointError as err:
        assert str(err).startswith(f"ckpt_path {str(path)!r}: ") and "\n" not in str(err)
        return
    # each zip member's CRC-32 is checked (issue 41): a flip that passes is outside every member's
    # data (a header's timestamp, the archive's comment...), so what loads is what was saved
    original = torch.load(io.BytesIO(data), weights_only=True)
    assert _identical(accepted, original), flips


def _identical(a, b) -> bool:
    """``a`` and ``b`` hold the same values (the checkpoint holds no NaN: ``torch.equal`` suffices)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same_kind = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
        return same_kind and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_identical, a, b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("offset", [0.3, 0.6, 0.9])
def test_a_flipped_bit_in_a_tensors_data_is_refused_naming_its_member(tmp_path, run, offset):
    """``torch.load`` does not check the zip's CRC-32: one flipped bit of a weight loaded as another
    weight (issue 41). Every member is read through ``zipfile`` first, which checks it."""
    data = run[0]
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    damaged = bytearray(data)
    damaged[start + int(offset * info.file_size)] ^= 0x01
    path = tmp_path / "last.ckpt"
    path.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(path, stage="fit")
    assert str(err.value) == (
        f"ckpt_path {str(path)!r}: not a safe, complete checkpoint: the file is incomplete or corrupt: zip member"
        f" {info.filename!r} fails its CRC-32 check (its bytes changed after it was saved)"
    )


def test_an_epoch_counter_past_the_rounds_recorded_is_refused():
    """Lightning resumes at ``epoch_progress.current.completed``: a checkpoint whose completed counters
    say 7 rounds while the run recorded 2 failed with Lightning's exit 1 (found from outside, issue 41)."""
    from lightning_fed.federation.checkpoint_check import loop_problem

    def ckpt(current: int, total: int) -> dict:
        # each record in order (processed >= completed: checked first, counters_problem)
        progress = {
            "current": {"processed": max(2, current), "completed": current},
            "total": {"processed": max(2, total), "completed": total},
        }
        return {"loops": {"fit_loop": {"epoch_progress": progress}}, "global_step": 0}

    assert loop_problem(ckpt(2, 2), rounds=2) is None
    assert loop_problem(ckpt(7, 7), rounds=2) == (
        "loops.fit_loop.epoch_progress.current.completed",
        "is 7, more than the 2 rounds recorded (federation.report.rounds)",
    )
    assert loop_problem(ckpt(2, 9), rounds=2)[0] == "loops.fit_loop.epoch_progress.total.completed"
