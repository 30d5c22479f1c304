"""ClientStateStore: memory budget with a running count, dirty tracking, versioned files, index, GC."""

from __future__ import annotations

import shutil

import pytest
import torch

from lightning_fed.errors import CheckpointError
from lightning_fed.federation import ClientStateStore

# One client's state: 10 float32 personal + 10 float32 memory = 80 bytes.
ENTRY = 80


def put(store: ClientStateStore, cid: int, value: float) -> None:
    store.put(cid, {"w": torch.full((10,), value)}, {"c": torch.full((10,), -value)})


def files(folder) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_budget_holds_with_a_running_count_and_each_state_is_written_once(tmp_path):
    store = ClientStateStore(max_memory_bytes=2 * ENTRY, offload_dir=tmp_path)
    for cid in range(5):
        put(store, cid, float(cid))
        # at most two states fit: the newest two are in memory, the running count says so
        assert list(store._mem) == list(range(max(0, cid - 1), cid + 1))
        assert store.nbytes_in_memory == ENTRY * min(cid + 1, 2)
    assert store.files_written == 3 and len(files(tmp_path)) == 3  # clients 0, 1, 2 left memory
    assert store.bytes_written == sum(p.stat().st_size for p in tmp_path.iterdir())

    # Reading client 0 back evicts client 3 (dirty: written) and keeps 0 and 4 in memory.
    assert store.get(0)["personal"]["w"].tolist() == [0.0] * 10
    assert list(store._mem) == [4, 0] and store.files_written == 4
    store.get(1)  # evicts 4, dirty: written
    assert list(store._mem) == [0, 1] and store.files_written == 5
    written = store.bytes_written
    store.get(2)  # evicts 0, unchanged since its file: nothing written
    assert list(store._mem) == [1, 2] and store.files_written == 5 and store.bytes_written == written
    assert store.get(0)["memory"]["c"].tolist() == [-0.0] * 10
    assert sorted(store.client_ids()) == [0, 1, 2, 3, 4] and len(store) == 5
    assert store.nbytes_in_memory == 2 * ENTRY


def test_get_returns_dicts_the_caller_owns(tmp_path):
    store = ClientStateStore(offload_dir=tmp_path)
    put(store, 0, 1.0)
    entry = store.get(0)
    entry["memory"]["c"] = torch.zeros(10)  # e.g. a turn that fails after replacing c_i
    entry["personal"]["extra"] = torch.zeros(1)
    assert store.get(0)["memory"]["c"].tolist() == [-1.0] * 10 and "extra" not in store.get(0)["personal"]
    assert store.get(7) == {"personal": {}, "memory": {}} and 7 not in store


def test_unchanged_state_is_not_rewritten_and_old_versions_are_collected(tmp_path):
    store = ClientStateStore(offload_dir=tmp_path)
    put(store, 0, 1.0)
    put(store, 1, 2.0)
    first = store.index()  # checkpoint A
    assert store.files_written == 2 and set(first["files"]) == {0, 1}
    a0, a1 = (first["files"][c]["file"] for c in (0, 1))
    assert files(tmp_path) == {a0, a1}

    assert store.index() == first and store.files_written == 2  # nothing changed: nothing written
    put(store, 1, 2.0)  # a turn that ends with the same state: same content, same name
    assert store.index()["files"][1]["file"] == a1 and store.files_written == 2

    put(store, 0, 3.0)
    second = store.index()  # checkpoint B: client 0's new version, A's kept (B may not land)
    b0 = second["files"][0]["file"]
    assert b0 != a0 and second["files"][1]["file"] == a1 and files(tmp_path) == {a0, b0, a1}

    put(store, 0, 4.0)
    third = store.index()  # checkpoint C: B is complete now, A's version of client 0 goes
    c0 = third["files"][0]["file"]
    assert files(tmp_path) == {b0, c0, a1} and store.files_written == 4

    # Between checkpoints a newer version replaces an unreferenced one at once.
    put(store, 0, 5.0)
    store.flush()
    d0 = store._files[0].name
    put(store, 0, 6.0)
    store.flush()
    assert d0 not in files(tmp_path) and {b0, c0, a1} <= files(tmp_path)


def test_index_round_trips_lazily_and_bitwise(tmp_path):
    store = ClientStateStore(offload_dir=tmp_path, run="r")
    w = torch.randn(3, 5).to(torch.bfloat16)
    store.put(4, {"head.weight": w}, {"control/x": torch.arange(6.0)})
    store.put(9, {}, {"control/x": torch.ones(2, dtype=torch.float64)})
    index = store.index()
    assert index["folder"] == str(tmp_path.absolute()) and index["run"] == "r" and index["format"] == 1
    assert index["files"][4]["nbytes"] == (tmp_path / index["files"][4]["file"]).stat().st_size

    fresh = ClientStateStore(offload_dir=tmp_path, run="r")
    fresh.load_state_dict(index)
    assert fresh.nbytes_in_memory == 0 and fresh.client_ids() == [4, 9]  # nothing read yet
    got = fresh.get(4)
    assert got["personal"]["head.weight"].dtype == torch.bfloat16
    assert torch.equal(got["personal"]["head.weight"], w) and torch.equal(got["memory"]["control/x"], torch.arange(6.0))
    assert fresh.get(9)["personal"] == {} and fresh.get(9)["memory"]["control/x"].dtype == torch.float64
    assert fresh.index() == index and fresh.files_written == 0

    legacy = ClientStateStore(offload_dir=tmp_path / "legacy")  # an older checkpoint's full states
    legacy.load_state_dict({"4": {"personal": {"head.weight": w}}})
    assert torch.equal(legacy.get(4)["personal"]["head.weight"], w)


def test_missing_or_foreign_files_give_one_line_errors(tmp_path):
    store = ClientStateStore(offload_dir=tmp_path / "run" / "client_states")
    put(store, 3, 1.0)
    index = store.index()
    path = tmp_path / "run" / "client_states" / index["files"][3]["file"]

    # Copied elsewhere with its run folder: found through the fallback folder.
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    moved = ClientStateStore(offload_dir=tmp_path / "new")
    shutil.rmtree(tmp_path / "run")
    moved.load_state_dict(index, folder=tmp_path / "copy" / "client_states")
    assert moved.get(3)["personal"]["w"].tolist() == [1.0] * 10

    # Gone: the error names the client and the file, on one line.
    with pytest.raises(CheckpointError, match=rf"client 3's state file '{path}' is missing") as err:
        ClientStateStore().load_state_dict(index)
    assert "\n" not in str(err.value) and "client_states/" in str(err.value)

    # Deleted after the resume, before the client's turn: the same error at the read.
    copied = tmp_path / "copy" / "client_states" / index["files"][3]["file"]
    lazy = ClientStateStore()
    lazy.load_state_dict(index, folder=copied.parent)
    copied.unlink()
    with pytest.raises(CheckpointError, match=rf"client 3's state file '{copied}' is missing"):
        lazy.get(3)

    # Another file under that name: refused at the resume (size) or at the read (digest, below).
    shutil.copytree(tmp_path / "copy", tmp_path / "copy2")
    other = tmp_path / "copy2" / "client_states" / index["files"][3]["file"]
    other.write_bytes(b"x")
    with pytest.raises(CheckpointError, match="has 1 bytes, the checkpoint says"):
        ClientStateStore().load_state_dict(index, folder=other.parent)


def test_corrupt_file_is_named(tmp_path):
    store = ClientStateStore(offload_dir=tmp_path)
    put(store, 0, 1.0)
    index = store.index()
    path = tmp_path / index["files"][0]["file"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # one byte of a value flipped, size unchanged
    path.write_bytes(bytes(data))
    fresh = ClientStateStore()
    fresh.load_state_dict(index)
    with pytest.raises(CheckpointError, match=rf"'{path}' is corrupt"):
        fresh.get(0)


def test_a_resumed_run_never_deletes_another_runs_files(tmp_path):
    """Resumed into a new folder (or run): the first run's checkpoint keeps working."""
    first = ClientStateStore(offload_dir=tmp_path / "first", run="first")
    put(first, 0, 1.0)
    put(first, 1, 2.0)
    index = first.index()
    resumed = ClientStateStore(offload_dir=tmp_path / "second", run="second")
    resumed.load_state_dict(index)
    for value in (3.0, 4.0, 5.0):  # three checkpoints later client 0's first version is unreferenced
        put(resumed, 0, value)
        later = resumed.index()
    assert files(tmp_path / "first") == {index["files"][c]["file"] for c in (0, 1)}
    assert later["files"][1]["file"] == str(tmp_path / "first" / index["files"][1]["file"])
    assert len(files(tmp_path / "second")) == 2  # the current and the previous version of client 0

    # A run sharing the folder with equal states: its files have other names (the run is in the
    # content), so it never deletes the first run's.
    twin = ClientStateStore(offload_dir=tmp_path / "first", run="twin")
    for value in (1.0, 3.0, 4.0, 5.0):
        put(twin, 0, value)
        twin.index()
    assert index["files"][0]["file"] in files(tmp_path / "first")

    # The same run resuming in its own folder (the CLI) owns them: superseded versions go.
    same = ClientStateStore(offload_dir=tmp_path / "first", run="first")
    same.load_state_dict(index)
    for value in (3.0, 4.0, 5.0):
        put(same, 0, value)
        same.index()
    assert index["files"][0]["file"] not in files(tmp_path / "first")
    assert index["files"][1]["file"] in files(tmp_path / "first")


def test_empty_state_is_not_kept(tmp_path):
    store = ClientStateStore(offload_dir=tmp_path)
    store.put(0, {}, {})
    assert 0 not in store and len(store) == 0
    assert store.index()["files"] == {} and not list(tmp_path.iterdir())
    store.put(1, {"w": torch.ones(2)}, {})
    store.index()
    assert [p.name.startswith("client_1-") for p in tmp_path.iterdir()] == [True]
    store.put(1, {}, {})  # the client's state became empty: it is forgotten
    assert 1 not in store and store.get(1) == {"personal": {}, "memory": {}}
    assert store.index()["files"] == {}


def _file_of(tmp_path, cid: int, entry: dict) -> tuple[dict, str]:
    """An index referencing a state file with ``entry``'s tensors under its canonical name."""
    from lightning_fed.federation.store import encode_entry

    name, data = encode_entry(cid, entry)
    (tmp_path / name).write_bytes(data)
    return {"format": 1, "folder": str(tmp_path), "run": "", "files": {cid: {"file": name, "nbytes": len(data)}}}, name


LAYOUT = {"personal": {"w": (10,)}, "memory": {"w": (10,), "lora.A": (2, 3)}}


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"personal": {"w": torch.zeros(4)}}, "'personal/w' has shape (4,), the model's 'w' has (10,)"),
        (
            {"personal": {"w": torch.zeros(10, dtype=torch.int64)}},
            "'personal/w' is int64: a client's state is floating",
        ),
        (
            {"personal": {"w": torch.zeros(10), "huge": torch.zeros(1000)}},
            "'personal/huge' names no personal parameter",
        ),
        ({"memory": {"control/lora.A": torch.zeros(3, 2)}}, "'memory/control/lora.A' has shape (3, 2), the model's"),
        ({"memory": {"control/nope": torch.zeros(1)}}, "'memory/control/nope' names no shared or personal parameter"),
    ],
)
def test_state_files_are_checked_against_the_model_layout(tmp_path, entry, problem):
    """Issue 22 item 7: a wrong shape failed inside a local step (exit 1, unnamed); int64 values
    and an extra key were accepted."""
    index, name = _file_of(tmp_path, 2, {"personal": {}, "memory": {}, **entry})
    store = ClientStateStore()
    store.load_state_dict(index)
    with pytest.raises(CheckpointError) as err:
        store.get(2, LAYOUT)
    assert str(err.value).startswith(f"client 2's state file '{tmp_path / name}': {problem}"), str(err.value)


def test_a_state_file_that_is_not_canonically_named_is_refused(tmp_path):
    index, name = _file_of(tmp_path, 1, {"personal": {"w": torch.zeros(10)}, "memory": {}})
    (tmp_path / name).rename(tmp_path / "state.safetensors")
    index["files"][1]["file"] = "state.safetensors"
    with pytest.raises(CheckpointError, match=r"is not named client_1-<digest>\.safetensors"):
        ClientStateStore().load_state_dict(index)
    index["files"] = {0: {**index["files"][1], "file": name}}  # another client's file
    (tmp_path / "state.safetensors").rename(tmp_path / name)
    with pytest.raises(CheckpointError, match=r"client 0's state file .* is not named client_0-<digest>"):
        ClientStateStore().load_state_dict(index)
    good = ClientStateStore()
    good.load_state_dict({**index, "files": {1: index["files"][0]}})
    assert good.get(1, LAYOUT)["personal"]["w"].tolist() == [0.0] * 10
