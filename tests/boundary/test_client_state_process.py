"""Client state files a resumed checkpoint references (issue 34 item 7): a file with NaN values,
or one whose metadata names another client than its name, is exit 2 with one line naming the
client and the file, before the run folder is made (a NaN was accepted and that client's update
rejected every round, exit 0; a file of client 0 renamed after client 1 was accepted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load as load_safetensors

from lightning_fed.federation.store import encode_entry

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)
ARGS = ["--trainer.enable_progress_bar=false", "--federation.local_steps=1", "--federation.strategy=Scaffold"]


def _fit(root: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", "configs/tiny.yaml"]
    cmd += [f"--trainer.default_root_dir={root}", *ARGS, *extra]
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A SCAFFOLD checkpoint after one round: two clients with a control variate file each."""
    root = tmp_path_factory.mktemp("scaffold")
    proc = _fit(root, "--federation.rounds=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"


def _entry(path: Path) -> dict:
    entry = {"personal": {}, "memory": {}}
    for key, value in load_safetensors(path.read_bytes()).items():
        part, _, name = key.partition("/")
        entry[part][name] = value
    return entry


def _crafted(tmp_path: Path, trained: Path, make) -> tuple[Path, Path]:
    """A copy of the checkpoint whose index references one state file ``make(cid, entry)`` writes
    (canonically named after the client the index gives it, so only its content is wrong)."""
    ckpt = torch.load(trained, weights_only=True)
    clients = ckpt["federation"]["clients"]
    cid, ref = next(iter(sorted(clients["files"].items())))
    folder = tmp_path / "client_states"
    folder.mkdir()
    listed_cid, entry = make(cid, _entry(Path(clients["folder"]) / ref["file"]))
    name, data = encode_entry(listed_cid, entry, clients["run"])
    name = f"client_{cid}-{name.split('-', 1)[1]}"  # the digest of the content, under this client's name
    (folder / name).write_bytes(data)
    clients.update(folder=str(folder), files={cid: {"file": name, "nbytes": len(data)}})
    path = tmp_path / "crafted.ckpt"
    torch.save(ckpt, path)
    return path, folder / name


def _nan(cid, entry):
    key = sorted(entry["memory"])[0]
    entry["memory"][key] = torch.full_like(entry["memory"][key], float("nan"))
    return cid, entry


def _other_client(cid, entry):
    return cid + 1, entry


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (_nan, ": 'memory/{key}' has NaN or infinite values"),
        (
            _other_client,
            " holds client {other}'s state (its 'lightning_fed.client_state' metadata): it is not the file"
            " the checkpoint references for client {cid}",
        ),
    ],
    ids=["nan", "other_client"],
)
def test_a_bad_client_state_file_is_refused_before_the_run_folder(tmp_path, trained, make, problem):
    path, state_file = _crafted(tmp_path, trained, make)
    cid = int(state_file.name.split("_")[1].split("-")[0])
    key = sorted(_entry(state_file)["memory"])[0]
    proc = _fit(tmp_path / "run", "--federation.rounds=2", f"--ckpt_path={path}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    line = problem.format(key=key, cid=cid, other=cid + 1)
    assert errors == [f"error: ckpt_path {str(path)!r}: client {cid}'s state file {str(state_file)!r}{line}"], (
        proc.stderr[-3000:]
    )
    assert not (tmp_path / "run").exists()
