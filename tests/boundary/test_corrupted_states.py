"""Property tests of issue 34: a generated corruption of a valid checkpoint, adapter folder or
client state file (a tensor dropped, added, reshaped, set to NaN or retyped; the metadata naming
another client or another rank) is refused as a user error (exit 2, one line naming the file) or
gives exactly the result of the file before it was corrupted: never accepted with a different
model, never another exception (exit 1).

The checks run in-process, as the CLI runs them (:func:`check_weights` for ``fit``/``validate``/
``test``, ``check_adapter_folder`` then ``load_model`` for ``evaluate --run``, the store for a
client's file); tests/test_checkpoint_boundary.py, test_evaluated_files.py and
test_client_state_process.py show the same refusals as processes.

Not covered, because no check can tell them from a real file: two tensors of one shape swapped,
a changed ``lora_alpha``, a client's memory tensor dropped (a strategy decides which it holds).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from lightning_fed.errors import CheckpointError
from lightning_fed.federation.resume_check import check_weights
from lightning_fed.federation.store import ClientStateStore, encode_entry, state_layout
from tests.boundary.properties import assert_user_error

OPS = ["drop", "add", "reshape", "nan", "retype"]
DTYPES = [torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.bool]
# Each example is cheap (the adapter ones build a tiny model); HYPOTHESIS_PROFILE=long runs more.
FEW = settings(max_examples=25) if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci" else (lambda f: f)


def corrupt(state: dict, op: str, index: int, dtype: torch.dtype) -> dict:
    """``state`` with one tensor changed by ``op`` (a copy; ``state`` is left as it is)."""
    state = dict(state)
    key = sorted(state)[index % len(state)]
    value = state[key]
    if op == "drop":
        del state[key]
    elif op == "add":
        state[key.replace(".0.", ".9.", 1) if ".0." in key else key + "_x"] = value.clone()
    elif op == "reshape":
        state[key] = torch.zeros(value.shape[0] + 1, *value.shape[1:], dtype=value.dtype)
    elif op == "nan":
        state[key] = value.clone().fill_(float("nan"))
    else:
        state[key] = value.to(dtype)
    return state


corruptions = st.tuples(st.sampled_from(OPS), st.integers(0, 63), st.sampled_from(DTYPES))


# ----------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def module():
    from tests.helpers.runs import tiny_dpo

    return tiny_dpo(seed=1)


def _checkpoint(module) -> dict:
    g = torch.Generator().manual_seed(0)
    shared = {k: torch.randn(v.shape, generator=g) for k, v in module.shared_parameters().items()}
    return {"state_dict": {k: v.clone() for k, v in shared.items()}, "federation": {"global_state": shared}}


def resumed(module, ckpt: dict) -> dict:
    """The trainable state a run resumes with: ``state_dict`` copied in (``strict=False``), then the
    global state over the shared parameters (as the loop loads it before each turn)."""
    out = {k: v.detach().clone() for k, v in module.named_parameters() if v.requires_grad}
    for source in (ckpt["state_dict"], ckpt["federation"]["global_state"]):
        for key, value in source.items():
            out[key].copy_(value)
    return out


@FEW
@given(section=st.sampled_from(["state_dict", "global_state"]), corruption=corruptions)
def test_a_corrupted_checkpoint_is_refused_or_resumes_identically(module, section, corruption):
    good = _checkpoint(module)
    bad = {"state_dict": good["state_dict"], "federation": {"global_state": good["federation"]["global_state"]}}
    if section == "state_dict":
        bad["state_dict"] = corrupt(good["state_dict"], *corruption)
    else:
        bad["federation"] = {"global_state": corrupt(good["federation"]["global_state"], *corruption)}
    path = Path("/runs/x/last.ckpt")
    try:
        check_weights(path, bad, module)
    except CheckpointError as err:
        assert_user_error(err, str(path))
        return
    want, got = resumed(module, good), resumed(module, bad)
    assert all(torch.equal(want[k], got[k]) for k in want), corruption


# ----------------------------------------------------------------------------- adapters
@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    from tests.evaluation.eval_runs import make_run

    root = tmp_path_factory.mktemp("adapter") / "version_0"
    make_run(root)
    return root


def _evaluated(folder: Path) -> dict:
    """What ``evaluate --run <folder>`` scores: the files checked, then the model built."""
    from lightning_fed.evaluation.run_model import ModelSource, load_model
    from lightning_fed.modules.adapter_files import check_adapter_folder

    check_adapter_folder(folder / "adapter", "--run")
    return load_model(ModelSource(run=str(folder))).model.state_dict()


@FEW
@given(corruption=corruptions, r=st.sampled_from([None, None, 2, 8]))
def test_a_corrupted_adapter_is_refused_or_evaluates_identically(run, corruption, r):
    want = _evaluated(run)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "version_0"
        shutil.copytree(run, copy)
        weights = copy / "adapter" / "adapter_model.safetensors"
        save_file(corrupt(load_file(str(weights)), *corruption), str(weights))
        if r is not None:  # the metadata says another rank than the weights have
            config = copy / "adapter" / "adapter_config.json"
            config.write_text(json.dumps({**json.loads(config.read_text()), "r": r}))
        try:
            got = _evaluated(copy)
        except ValueError as err:
            assert_user_error(err, str(copy))
            return
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want), (corruption, r)


# ----------------------------------------------------------------------------- client state files
PERSONAL = {"head.w": torch.ones(2, 3), "head.b": torch.full((3,), 0.5)}
SHARED = {"lora.A": torch.ones(4)}
LAYOUT = state_layout(PERSONAL, SHARED)


@FEW
@given(
    part=st.sampled_from(["personal", "memory"]),
    corruption=st.tuples(st.sampled_from(OPS), st.integers(0, 7), st.sampled_from([torch.int64, torch.float64])),
    owner=st.sampled_from([1, 1, 0]),
    listed=st.sampled_from([1, 1, 2]),
)
def test_a_corrupted_client_state_file_is_refused_or_read_identically(part, corruption, owner, listed):
    """Client 1's file: its content corrupted, written for ``owner``, listed under ``listed``."""
    good = {"personal": dict(PERSONAL), "memory": {"control/lora.A": torch.full((4,), 2.0)}}
    if part == "memory" and corruption[0] == "drop":
        corruption = ("nan", *corruption[1:])  # see the module docstring
    bad = {**good, part: corrupt(good[part], *corruption)}
    with tempfile.TemporaryDirectory() as folder:
        name, data = encode_entry(owner, bad, run="r")
        name = f"client_1-{name.split('-', 1)[1]}"
        (Path(folder) / name).write_bytes(data)
        index = {"format": 1, "folder": folder, "run": "r", "files": {listed: {"file": name, "nbytes": len(data)}}}
        store = ClientStateStore()
        try:
            store.load_state_dict(json.loads(json.dumps(index)))
            store.check_files(state_layout(PERSONAL, SHARED, memory_shapes=False))  # at resume
            got = store.get(listed, LAYOUT)  # at the client's turn
        except CheckpointError as err:
            assert_user_error(err, "client")
            return
    # Accepted: what the turn loads (cast to the parameters' dtype) is the uncorrupted state.
    assert (owner, listed) == (1, 1)
    for p in ("personal", "memory"):
        assert got[p].keys() == good[p].keys(), corruption
        assert all(torch.equal(got[p][k].float(), good[p][k]) for k in good[p]), corruption


# ----------------------------------------------------------------------------- as a process
ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)
ARGS = ["--trainer.enable_progress_bar=false", "--federation.local_steps=1", "--trainer.logger=false"]


def _fit(root: Path, *extra: str):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", "configs/tiny.yaml"]
    cmd += [f"--trainer.default_root_dir={root}", *ARGS, *extra]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory) -> tuple[dict, dict]:
    """A tiny checkpoint after one round, and the adapter a resume to two rounds ends with."""
    root = tmp_path_factory.mktemp("trained")
    assert _fit(root, "--federation.rounds=1").returncode == 0
    ckpt_path = root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    ckpt = torch.load(ckpt_path, weights_only=True)
    again = tmp_path_factory.mktemp("again")
    path = again / "last.ckpt"
    torch.save(ckpt, path)
    proc = _fit(again / "run", "--federation.rounds=2", f"--ckpt_path={path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return ckpt, load_file(str(next((again / "run").rglob("adapter_model.safetensors"))))


@pytest.mark.slow
@settings(max_examples=3) if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci" else (lambda f: f)
@given(corruption=corruptions)
def test_a_corrupted_global_state_resumes_identically_or_exits_2_as_a_process(
    tmp_path_factory, resumed_run, corruption
):
    ckpt, want = resumed_run
    folder = tmp_path_factory.mktemp("corrupted")
    path = folder / "last.ckpt"
    torch.save(
        {
            **ckpt,
            "federation": {
                **ckpt["federation"],
                "global_state": corrupt(ckpt["federation"]["global_state"], *corruption),
            },
        },
        path,
    )
    proc = _fit(folder / "run", "--federation.rounds=2", f"--ckpt_path={path}")
    assert proc.returncode in (0, 2), (corruption, proc.stderr[-3000:])
    if proc.returncode == 2:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and str(path) in errors[0], (corruption, proc.stderr[-3000:])
        assert not (folder / "run").exists()
        return
    got = load_file(str(next((folder / "run").rglob("adapter_model.safetensors"))))
    assert all(torch.equal(want[k], got[k]) for k in want), corruption
