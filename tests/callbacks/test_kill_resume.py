"""kill -9 at random points, checkpoint and client state writes included, then resume: same
result as no kill. The run has spilled client state: FedPer (personal LoRA and LM head) with
SCAFFOLD (a control variate per client) and a memory budget of 1 byte, so every client but the
one training lives in its file under <run>/client_states and the checkpoints reference them."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from lightning_fed.federation.client_metrics import read_client_metrics
from lightning_fed.federation.store import read_entry

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "helpers" / "kill_driver.py"
ROUNDS, CLIENTS_PER_ROUND, LOCAL_STEPS = 3, 2, 3
BATCHES = ROUNDS * CLIENTS_PER_ROUND * LOCAL_STEPS


def _config(root: Path) -> Path:
    """configs/tiny.yaml with spilled per-client state (see the module docstring)."""
    config = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    config["model"]["class_path"] = "lightning_fed.modules.fedper.FedPerModule"
    config["model"]["init_args"]["shared_layers"] = 1
    config["federation"]["strategy"] = {"class_path": "lightning_fed.strategies.Scaffold"}
    config["federation"]["max_state_memory_bytes"] = 1
    path = root / "spilled.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run(
    root: Path, mode: str = "none", at: int = 0, resume: bool = False, defaults: bool = False, rounds: int = ROUNDS
) -> subprocess.CompletedProcess:
    """``defaults``: configs/tiny.yaml as shipped (FedDPO, reference cache on) instead of the spilled run."""
    args = [
        "fit",
        "--config",
        str(ROOT / "configs" / "tiny.yaml") if defaults else str(_config(root)),
        f"--trainer.default_root_dir={root}",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        f"--federation.rounds={rounds}",
        # BATCHES counts a sequential run's batches (a batched group of K takes one for K clients)
        *([] if defaults else [f"--federation.local_steps={LOCAL_STEPS}", "--federation.batch_clients=off"]),
    ]
    last = _run_dir(root) / "checkpoints" / "last.ckpt"
    if resume and last.exists():
        args.append(f"--ckpt_path={last}")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(DRIVER), mode, str(at), "--", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )


def _run_dir(root: Path) -> Path:
    """The newest run folder (logger=false still gives every run its own lightning_logs/version_N)."""
    runs = sorted(root.glob("lightning_logs/version_*"), key=lambda p: int(p.name.split("_")[1]))
    return runs[-1] if runs else root / "lightning_logs" / "version_0"


def _result(root: Path) -> tuple[dict[str, torch.Tensor], list[dict], dict[str, dict]]:
    root = _run_dir(root)
    adapter = load_file(str(root / "adapter" / "adapter_model.safetensors"))
    rounds = json.loads((root / "summary.json").read_text())["rounds"]
    for r in rounds:
        r.pop("seconds")
    # rounds.jsonl (summary.json's rounds) and each round's per-client Parquet rows, compared along
    lines = [json.loads(x) for x in (root / "rounds.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in x.items() if k != "seconds"} for x in lines] == rounds
    for stage in ("train", "val"):
        rows = read_client_metrics(root, stage).to_pylist()
        for r in rounds:
            r[f"{stage}_rows"] = [x for x in rows if x["round"] == r["round"]]
    # Each client's final state, from the file the run's index names.
    index = json.loads((root / "client_states.json").read_text())
    states = {cid: read_entry(root / "client_states" / ref["file"]) for cid, ref in index["files"].items()}
    return adapter, rounds, states


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("straight")
    proc = _run(root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _result(root)


# Five kill points drawn once (seeded): two after a random training batch, one halfway through
# writing a client state file (a few are written per round), two halfway through writing a
# checkpoint file (the 1st and a random later one).
_rng = random.Random(20261122)
KILLS = [("batch", _rng.randint(1, BATCHES - 1)) for _ in range(2)] + [("state", _rng.randint(1, 4))]
KILLS += [("save", 1), ("save", _rng.randint(2, ROUNDS))]


@pytest.mark.parametrize(("mode", "at"), KILLS, ids=[f"{m}{a}" for m, a in KILLS])
def test_kill_9_then_resume_equals_uninterrupted(tmp_path, uninterrupted, mode, at):
    killed = _run(tmp_path, mode, at)
    assert killed.returncode == -9, killed.stderr[-3000:]
    for ckpt in (_run_dir(tmp_path) / "checkpoints").glob("*.ckpt"):  # whatever survived is a whole checkpoint
        torch.load(ckpt, weights_only=False, map_location="cpu")
    resumed = _run(tmp_path, resume=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    adapter, rounds, states = _result(tmp_path)
    ref_adapter, ref_rounds, ref_states = uninterrupted
    assert sorted(states) == sorted(ref_states) == ["0", "1", "2", "3"]
    for cid, entry in ref_states.items():  # every client's personal state and c_i, bitwise
        for part in ("personal", "memory"):
            assert entry[part] and entry[part].keys() == states[cid][part].keys(), (cid, part)
            assert all(torch.equal(states[cid][part][k], v) for k, v in entry[part].items()), (cid, part)
    # ... although the checkpoints hold no client state, no Adam moments and no personal parameters
    # (FedPer's: the LoRA of block 1 and the personal LM head), only the index of the state files.
    ckpt = torch.load(_run_dir(tmp_path) / "checkpoints" / "last.ckpt", weights_only=True)
    assert [s["state"] for s in ckpt["optimizer_states"]] == [{}]
    assert ckpt["state_dict"] and not any(".h.1." in k or "lm_head" in k for k in ckpt["state_dict"])
    assert sorted(ckpt["federation"]["clients"]["files"]) == [0, 1, 2, 3]
    assert adapter.keys() == ref_adapter.keys()
    for k, v in ref_adapter.items():
        assert torch.equal(adapter[k], v), k  # bitwise: the reference cache is restored too (issue 22)
    assert [r["clients"] for r in rounds] == [r["clients"] for r in ref_rounds]
    for r, ref in zip(rounds, ref_rounds, strict=True):
        assert r["val"] == pytest.approx(ref["val"], rel=1e-4)
        assert r["train_stats"] == pytest.approx(ref["train_stats"], rel=1e-4) and r["up_bytes"] == ref["up_bytes"]
        assert r["train_rows"]  # per-client rows: those of a round recorded before the kill are not doubled
        for stage in ("train_rows", "val_rows"):
            assert [x["client"] for x in r[stage]] == [x["client"] for x in ref[stage]], stage
            for row, ref_row in zip(r[stage], ref[stage]):
                metrics, ref_metrics = ({k: v for k, v in x.items() if isinstance(v, float)} for x in (row, ref_row))
                assert metrics == pytest.approx(ref_metrics, rel=1e-4)
                assert {k: v for k, v in row.items() if k not in metrics} == {
                    k: v for k, v in ref_row.items() if k not in ref_metrics
                }
    assert not list(
        (_run_dir(tmp_path) / "checkpoints").glob("*.tmp")
    )  # no half-written file left visible as a checkpoint


def test_resume_with_the_shipped_defaults_is_bitwise(tmp_path):
    """configs/tiny.yaml unchanged: FedDPO with its reference cache on (the default). A run of 2
    rounds (its final evaluation fills the cache in batches the 3-round run never forms) resumed to
    3 equals the 3-round run bitwise: the cache is in the checkpoint, so the resumed run serves the
    values the uninterrupted one computed (issue 22: refilled, the adapters ended ~1e-6 apart)."""
    straight = _run(tmp_path / "straight", defaults=True)
    assert straight.returncode == 0, straight.stderr[-3000:]
    first = _run(tmp_path / "resumed", defaults=True, rounds=ROUNDS - 1)
    assert first.returncode == 0, first.stderr[-3000:]
    ckpt = torch.load(_run_dir(tmp_path / "resumed") / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["reference_cache"]["keys"].shape[0] > 0
    resumed = _run(tmp_path / "resumed", resume=True, defaults=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    adapter, ref_adapter = (
        load_file(str(_run_dir(tmp_path / name) / "adapter" / "adapter_model.safetensors"))
        for name in ("resumed", "straight")
    )
    assert adapter.keys() == ref_adapter.keys()
    assert [k for k, v in ref_adapter.items() if not torch.equal(adapter[k], v)] == []
