"""Property tests of checkpoint and client-state files (issue 22): whatever a file holds, reading
it either gives what the run can use or a one-line user error naming the file; never another
exception (that would be exit 1 for an input)."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import torch
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import save as save_safetensors

from lightning_fed.errors import CheckpointError
from lightning_fed.federation.checkpoint_io import RESUME_FIELDS, read_checkpoint
from lightning_fed.federation.store import ClientStateStore, encode_entry
from tests.boundary.properties import assert_user_error

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int8, torch.bool]
shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3)
tensors = st.builds(lambda s, d: torch.zeros(s, dtype=d), shapes, st.sampled_from(DTYPES))
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=8)
)
values = st.recursive(
    st.one_of(scalars, tensors),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)
KEYS = ["state_dict", "pytorch-lightning_version", *RESUME_FIELDS, "federation", "hyper_parameters", "x"]


@st.composite
def checkpoints(draw):
    ckpt = draw(st.dictionaries(st.sampled_from(KEYS), values, max_size=len(KEYS)))
    if draw(st.booleans()):  # mostly well-formed, one field off: the interesting region
        base = {
            "state_dict": {"w": torch.zeros(2)},
            "pytorch-lightning_version": "2.6.6",
            "epoch": 0,
            "global_step": 0,
            "loops": {"fit_loop": {}},
            "callbacks": {},
            "optimizer_states": [],
            "lr_schedulers": [],
        }
        ckpt = {**base, **dict(list(ckpt.items())[:1])}
    return ckpt


@given(ckpt=checkpoints(), stage=st.sampled_from([None, "fit", "validate", "test"]), cut=st.integers(0, 100))
def test_any_checkpoint_is_read_or_refused_in_one_line(ckpt, stage, cut):
    buffer = io.BytesIO()
    torch.save(ckpt, buffer)
    data = buffer.getvalue()
    if cut < 20:  # a truncated file (a kill during a copy)
        data = data[: len(data) * cut // 20]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "last.ckpt"
        path.write_bytes(data)
        try:
            got = read_checkpoint(path, stage=stage)
        except CheckpointError as err:
            assert_user_error(err, str(path))
            return
    # Accepted: what the stage reads is there, of the type Lightning expects.
    assert all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in got["state_dict"].items())
    if stage == "fit":
        assert all(isinstance(got[k], t) for k, t in RESUME_FIELDS.items())


LAYOUT = {"personal": {"head.w": (2, 3)}, "memory": {"lora.A": (4,), "head.w": (2, 3)}}
names = st.one_of(
    st.sampled_from(["personal/head.w", "memory/control/lora.A", "memory/control/head.w"]),
    st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), min_size=1, max_size=12),
)


@st.composite
def state_files(draw):
    """(file name, bytes, index nbytes) of a client state: canonical or not, well-formed or not."""
    flat = draw(st.dictionaries(names, tensors, max_size=4))
    cid = draw(st.integers(0, 3))
    kind = draw(st.sampled_from(["canonical", "raw", "renamed", "corrupt", "truncated"]))
    if kind == "raw" or any("/" not in k for k in flat):
        data = save_safetensors({k: v.contiguous() for k, v in flat.items()})
        name = f"client_{cid}-{'0' * 16}.safetensors"
    else:
        entry = {"personal": {}, "memory": {}}
        for key, value in flat.items():
            part, _, rest = key.partition("/")
            entry.setdefault(part, {})[rest] = value
        name, data = encode_entry(cid, entry)
    if kind == "renamed":
        name = draw(st.sampled_from([f"client_{cid + 1}-{name[-28:]}", "state.safetensors", "../x.safetensors"]))
    if kind == "corrupt" and data:
        data = bytes([data[0] ^ 1]) + data[1:]
    if kind == "truncated":
        data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
    return cid, name, data


@given(spec=state_files(), nbytes_off=st.sampled_from([0, 0, 0, 1]))
def test_any_client_state_file_is_used_or_refused_in_one_line(spec, nbytes_off):
    cid, name, data = spec
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        if path.parent == Path(folder):
            path.write_bytes(data)
        index = {
            "format": 1,
            "folder": folder,
            "run": "",
            "files": {cid: {"file": name, "nbytes": len(data) + nbytes_off}},
        }
        store = ClientStateStore()
        try:
            store.load_state_dict(json.loads(json.dumps(index)))  # as a checkpoint holds it
            entry = store.get(cid, LAYOUT)
        except CheckpointError as err:
            assert_user_error(err, f"client {cid}'s state file")
            return
    for part, tensors_ in entry.items():  # accepted: every tensor fits the layout
        for key, value in tensors_.items():
            param = key if part == "personal" else key.rsplit("/", 1)[-1]
            assert value.is_floating_point() and tuple(value.shape) == LAYOUT[part][param]
