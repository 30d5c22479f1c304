"""A run that fails never deletes or rewrites a file an earlier run wrote, and every part of a
checkpoint (the optimizer's settings and the strategy's keys included) is checked before the run
folder is touched (issue 41, items 1-4), as a process:
exit 2, one ``error:`` line naming the part or option and its value, the folder byte for byte."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from tests.helpers.files import assert_unchanged, snapshot
from tests.helpers.tiny_run import tiny_run

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)
QUIET = ["--trainer.enable_progress_bar=false", "--federation.local_steps=1"]


def _fit(
    root: Path, *extra: str, config: str = "configs/tiny.yaml", env: dict | None = None
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lightning_fed.cli", "fit", "--config", config]
    cmd += [f"--trainer.default_root_dir={root}", *QUIET, *extra]
    # no time-out: a busy CPU is slow
    return subprocess.run(cmd, cwd=ROOT, env=env or ENV, capture_output=True, text=True)


def _errors(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    """The run folder of one round of configs/tiny.yaml (trained once per session, copied by each test)."""
    return tiny_run(tmp_path_factory)


def _copy(earlier: Path, tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    shutil.copytree(earlier, root)
    return root, root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"


def _set(path: tuple, value):
    def change(ckpt: dict) -> None:
        target = ckpt
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _big_weight(ckpt: dict) -> None:
    state = ckpt["federation"]["global_state"]
    key = sorted(state)[0]
    state[key] = state[key].clone()
    state[key][0, 0] = 3e38  # finite: was every update rejected, exit 1 after training


GROUP = ("optimizer_states", 0, "param_groups", 0)
KEY = "model.base_model.model.transformer.h.0.attn.c_attn.lora_A.default.weight"
CASES = {  # each was exit 1, or exit 2 after files were written, or accepted (issue 41 items 1 and 2)
    "no federation": (
        lambda c: c.pop("federation"),
        "federation is missing: the federation's rounds, history and global state would start afresh while"
        " Lightning's loop continues; resume from a checkpoint lightning-fed fit wrote",
    ),
    "federation a list": (_set(("federation",), []), "federation is a list, expected a mapping"),
    "rounds -1": (
        _set(("federation", "report", "rounds"), -1),
        "federation.report.rounds is -1, expected a number of rounds >= 0",
    ),
    "rounds 1e9": (
        _set(("federation", "report", "rounds"), 10**9),
        "federation.report.rounds is 1000000000, but Lightning's loop state completed 1 rounds"
        " (loops.fit_loop.epoch_progress)",
    ),
    "privacy junk": (
        _set(("federation", "privacy"), {"rounds_accounted": "x"}),
        "federation.privacy.rounds_accounted is 'x', not what a run's privacy state holds",
    ),
    "global_step 1e12": (
        _set(("global_step",), 10**12),
        "global_step is 1000000000000, but Lightning's loop state counted 1 optimizer steps",  # 2 clients in one group
    ),
    "3e38 weight": (
        _big_weight,
        f"federation.global_state.{KEY} holds 3e+38, beyond any trained weight (at most 1e+06)",
    ),
    "empty optimizer state": (
        _set(("optimizer_states",), []),
        "optimizer_states holds 0 optimizer states, this model configures 1",
    ),
    # found from outside (the closing note of the last session, B2): exit 1 once training started
    "lr 1e9": (
        _set(GROUP + ("lr",), 1e9),
        "optimizer_states[0].param_groups[0].lr is 1000000000.0, this run's configured optimizer has 0.005",
    ),
    "lr a string": (
        _set(GROUP + ("lr",), "x"),
        "optimizer_states[0].param_groups[0].lr is 'x', this run's configured optimizer has 0.005",
    ),
    "betas": (
        _set(GROUP + ("betas",), (0.5, 0.5)),
        "optimizer_states[0].param_groups[0].betas is (0.5, 0.5), this run's configured optimizer has (0.9, 0.999)",
    ),
    "params past the model's": (
        _set(GROUP + ("params",), list(range(1, 17))),
        "optimizer_states[0].param_groups[0].params is [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],"
        " this run's configured optimizer has [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]",
    ),
    "optimizer state of another shape": (
        _set(("optimizer_states", 0, "state"), {0: {"step": torch.tensor(1.0), "exp_avg": torch.zeros(5)}}),
        "optimizer_states[0].state[0].exp_avg has shape (5,), its parameter's is (4, 32)",
    ),
    "unknown key in the strategy's state": (
        _set(("federation", "strategy"), {"m": {KEY: torch.zeros(4, 32)}}),
        "federation.strategy.m is not part of this run's FedAvg state (its keys: [])",
    ),
}


def _cache_value(value: float):
    def change(ckpt: dict) -> None:
        ckpt["reference_cache"]["values"][0, 0] = value

    return change


FIT_LOOP = ("loops", "fit_loop")
EPOCHS = FIT_LOOP + ("epoch_progress",)
CLIENT_FILE = "client_0-0123456789abcdef.safetensors"


CASES.update(
    {  # issue 41, the checkpoint part: each was accepted (training started), or named another part
        "NaN in the DPO reference cache": (
            _cache_value(float("nan")),
            "reference_cache.values has NaN or infinite values",
        ),
        "inf in the DPO reference cache": (
            _cache_value(float("-inf")),
            "reference_cache.values has NaN or infinite values",
        ),
        "_batches_that_stepped -1": (
            _set(FIT_LOOP + ("epoch_loop.state_dict", "_batches_that_stepped"), -1),
            "loops.fit_loop.epoch_loop.state_dict._batches_that_stepped is -1, expected a count >= 0",
        ),
        "_batches_that_stepped past the batches": (
            _set(FIT_LOOP + ("epoch_loop.state_dict", "_batches_that_stepped"), 10**6),
            "loops.fit_loop.epoch_loop.state_dict._batches_that_stepped is 1000000, more than the 1 batches the loop"
            " took (loops.fit_loop.epoch_loop.batch_progress.total.ready)",
        ),
        "epoch_progress.total.ready -1": (
            _set(EPOCHS + ("total", "ready"), -1),
            "loops.fit_loop.epoch_progress.total.ready is -1, expected a count >= 0",
        ),
        "batch_progress.current.completed 1.5": (
            _set(FIT_LOOP + ("epoch_loop.batch_progress", "current", "completed"), 1.5),
            "loops.fit_loop.epoch_loop.batch_progress.current.completed is 1.5, expected a count >= 0",
        ),
        "processed past started": (
            _set(EPOCHS + ("current", "processed"), 5),
            "loops.fit_loop.epoch_progress.current.processed is 5, more than"
            " loops.fit_loop.epoch_progress.current.started (1): no item is processed before it is started",
        ),
        "current past total": (
            _set(FIT_LOOP + ("epoch_loop.batch_progress", "total", "completed"), 0),
            "loops.fit_loop.epoch_loop.batch_progress.current.completed is 1, more than"
            " loops.fit_loop.epoch_loop.batch_progress.total.completed (0) over the whole fit",
        ),
        "epoch past the loop's": (
            _set(("epoch",), 5),
            "epoch is 5, but Lightning's loop state completed 0 epochs"
            " (loops.fit_loop.epoch_progress.current.completed)",
        ),
        # item 5: was named federation.privacy.rounds_accounted, the part left as it was
        "rounds 0": (
            _set(("federation", "report", "rounds"), 0),
            "federation.report.rounds is 0, but the privacy accountant counted 1 rounds"
            " (federation.privacy.rounds_accounted) and Lightning's loop state 1 (loops.fit_loop.epoch_progress)",
        ),
        "rounds_accounted 2": (
            _set(("federation", "privacy", "rounds_accounted"), 2),
            "federation.privacy.rounds_accounted is 2, more than the 1 rounds recorded (federation.report.rounds)",
        ),
    }
)


@pytest.mark.parametrize("case", list(CASES))
def test_a_checkpoint_part_that_does_not_fit_is_refused_and_the_run_folder_kept(tmp_path, earlier, case):
    change, problem = CASES[case]
    root, ckpt_file = _copy(earlier, tmp_path)
    ckpt = torch.load(ckpt_file, weights_only=True)
    change(ckpt)
    torch.save(ckpt, ckpt_file)  # resumed in its own folder: the earlier run's records are there
    before = snapshot(root)
    proc = _fit(root, "--federation.rounds=2", f"--ckpt_path={ckpt_file}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [f"error: ckpt_path {str(ckpt_file)!r}: {problem}"]
    assert_unchanged(before, root)


def test_a_missing_client_file_is_named_after_the_checkpoint(tmp_path, earlier):
    """Item 5: the error about a client state file the checkpoint references had no ``ckpt_path`` prefix."""
    root, ckpt_file = _copy(earlier, tmp_path)
    ckpt = torch.load(ckpt_file, weights_only=True)
    clients = ckpt["federation"]["clients"]
    clients["folder"] = str(ckpt_file.parent.parent / "client_states")  # this copy's, not the earlier run's
    clients["files"] = {0: {"file": CLIENT_FILE, "nbytes": 10}}
    torch.save(ckpt, ckpt_file)
    before = snapshot(root)
    proc = _fit(root, "--federation.rounds=2", f"--ckpt_path={ckpt_file}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    missing = ckpt_file.parent.parent / "client_states" / CLIENT_FILE
    assert _errors(proc) == [
        f"error: ckpt_path {str(ckpt_file)!r}: client 0's state file {str(missing)!r} is missing: the checkpoint"
        " references it; copy the run's client_states/ folder with its checkpoints/ (same layout)"
    ]
    assert_unchanged(before, root)


def _tensor_member(data: bytes) -> tuple[str, int]:
    """The name and the offset of the first byte of the largest tensor's data in a ``torch.save`` zip."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    return info.filename, info.header_offset + 30 + name_len + extra_len


def _flip(data: bytes) -> tuple[bytes, str]:
    member, start = _tensor_member(data)
    damaged = bytearray(data)
    damaged[start + 5] ^= 0x04  # one bit of one weight: torch.load read it as another weight
    return bytes(damaged), (
        f"not a safe, complete checkpoint: the file is incomplete or corrupt: zip member {member!r} fails its CRC-32"
        " check (its bytes changed after it was saved)"
    )


def _cut(data: bytes) -> tuple[bytes, str]:
    return data[: len(data) - 300], (
        "not a safe, complete checkpoint: the file is incomplete or corrupt: it starts as a zip archive but its zip"
        " directory is missing or damaged (truncated?): File is not a zip file"
    )


BYTES = {"a flipped bit in a tensor": _flip, "the last 300 bytes cut": _cut}  # item 3: the flip was accepted


@pytest.mark.parametrize("case", list(BYTES))
def test_damaged_bytes_are_refused_naming_the_member(tmp_path, earlier, case):
    root, ckpt_file = _copy(earlier, tmp_path)
    damaged, problem = BYTES[case](ckpt_file.read_bytes())
    ckpt_file.write_bytes(damaged)
    before = snapshot(root)
    proc = _fit(root, "--federation.rounds=2", f"--ckpt_path={ckpt_file}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [f"error: ckpt_path {str(ckpt_file)!r}: {problem}"]
    assert_unchanged(before, root)


PRIVATE = """\
federation:
  clients_per_round: 2
  privacy: {target_epsilon: 40.0}
  strategy:
    class_path: lightning_fed.privacy.ClientLevelDP
    init_args:
      strategy: {class_path: lightning_fed.strategies.FedAvg}
      clip_norm: 0.05
"""
"""configs/tiny.yaml made private as configs/feddpo_dp.yaml is (client-level DP around the server strategy)."""


@pytest.fixture(scope="module")
def private(tmp_path_factory) -> tuple[Path, Path, dict]:
    """(run root, the private overlay, the environment with its key store) after one private round."""
    root = tmp_path_factory.mktemp("private")
    overlay = root / "private.yaml"
    overlay.write_text(PRIVATE)
    env = {**ENV, "LIGHTNING_FED_KEY_DIR": str(root / "keys")}
    proc = _fit(root / "run", "--federation.rounds=1", "--config", str(overlay), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run", overlay, env


PRIVATE_CASES = {  # item 4: each was accepted, the run trained with a clip or a noise nobody configured
    "clip_norm -1": (
        _set(("federation", "strategy", "clip_norm"), -1.0),
        "federation.strategy.clip_norm is -1.0, expected a finite clipping norm > 0",
    ),
    "clip_norm not the configured one": (
        _set(("federation", "strategy", "clip_norm"), 0.5),
        "federation.strategy.clip_norm is 0.5, this run's configured clip_norm is 0.05",
    ),
    "noise_multiplier 0.01": (
        _set(("federation", "privacy", "noise_multiplier"), 0.01),
        "federation.privacy.noise_multiplier is 0.01, this run's privacy plan has {z!r} (calibrated for"
        " federation.privacy.target_epsilon=40 over 1 rounds)",
    ),
}


@pytest.mark.parametrize("case", list(PRIVATE_CASES))
def test_privacy_parameters_that_are_not_the_runs_are_refused(tmp_path, private, case):
    earlier_root, overlay, env = private
    change, problem = PRIVATE_CASES[case]
    root, ckpt_file = _copy(earlier_root, tmp_path)
    ckpt = torch.load(ckpt_file, weights_only=True)
    z = ckpt["federation"]["privacy"]["noise_multiplier"]
    change(ckpt)
    torch.save(ckpt, ckpt_file)
    before = snapshot(root)
    proc = _fit(root, "--federation.rounds=2", "--config", str(overlay), f"--ckpt_path={ckpt_file}", env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [f"error: ckpt_path {str(ckpt_file)!r}: {problem.format(z=z)}"]
    assert_unchanged(before, root)


def test_a_resume_in_its_folder_replaces_the_records_once_a_round_is_done(tmp_path, earlier):
    root, ckpt_file = _copy(earlier, tmp_path)
    run = ckpt_file.parent.parent
    proc = _fit(root, "--federation.rounds=2", f"--ckpt_path={ckpt_file}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len((run / "rounds.jsonl").read_text().splitlines()) == 2
    assert "  rounds: 2\n" in (run / "config.yaml").read_text()
    assert '"rounds": 2' in (run / "summary.json").read_text()
    modules = json.loads((run / "adapter" / "adapter_config.json").read_text())["target_modules"]
    assert modules == sorted(modules)  # PEFT's set, written in hash order before


OPTIONS = {  # issue 41 items 3 and 4: each was exit 1, or found after the run folder or the weights
    "ClientGrouping with FedAvg": (
        ["--federation.strategy=FedAvg"],
        "fedbiscuit_tiny",
        "error: federation.hooks[0]: ClientGrouping needs federation.strategy=FedBiscuit, got FedAvg",
    ),
    "secagg with int8": (
        ["--federation.compression=int8"],
        "secagg",
        "error: federation.compression='int8' cannot run under federation.strategy=SecureAggregation: the server"
        " sees only the masked sum of the updates, so it cannot decode each client's compressed upload (SecAgg+"
        " quantizes the updates itself); drop federation.compression",
    ),
    # each was found when the run was bound, after the backbone loaded (here: a backbone folder with no
    # model in it, which cannot load; a path to nothing is refused first, before torch: model_sources.py)
    "AsyncArrivals with FedAvg": (
        ["--federation.strategy=FedAvg", "--model.init_args.backbone.name_or_path={empty}"],
        "feddpo_fedbuff",
        "error: federation.hooks[0]: AsyncArrivals needs federation.strategy=FedBuff, got FedAvg",
    ),
    "ClientRanks with FedAvg": (
        ["--federation.strategy=FedAvg", "--model.init_args.backbone.name_or_path={empty}"],
        "feddpo_flexlora",
        "error: federation.hooks[0]: ClientRanks needs a heterogeneous-rank strategy (HetLoRA, FlexLoRA, FLoRA),"
        " got federation.strategy=FedAvg",
    ),
    "max_epochs -5": (
        ["--trainer.max_epochs=-5"],
        "configs/tiny.yaml",
        "error: trainer.max_epochs must be >= 0, or -1 for no limit, got -5",
    ),
    "gradient_clip_val nan": (
        ["--trainer.gradient_clip_val=nan"],
        "configs/tiny.yaml",
        "error: trainer.gradient_clip_val must be a finite number, got nan",
    ),
}


@pytest.mark.parametrize("case", list(OPTIONS))
def test_conflicting_options_are_refused_before_the_run_folder(tmp_path, case):
    extra, config, line = OPTIONS[case]
    (empty := tmp_path / "empty_model").mkdir()
    extra = [arg.format(empty=empty) for arg in extra]
    proc = _fit(tmp_path / "run", "--federation.rounds=1", *extra, config=config)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [line]
    assert not (tmp_path / "run").exists()
    assert "Loading" not in proc.stderr and "%|" not in proc.stderr  # no weights were loaded before the error


def test_a_checkpoint_wrong_in_itself_is_refused_before_lightning_is_imported(tmp_path, earlier):
    """Item 6: what needs only the checkpoint is checked right after the config, with torch alone
    imported (each refusal cost ~13 s of CPU for Lightning, transformers and PEFT; about 2 s now)."""
    root, ckpt_file = _copy(earlier, tmp_path)
    ckpt = torch.load(ckpt_file, weights_only=True)
    ckpt["reference_cache"]["values"][0, 0] = float("nan")
    torch.save(ckpt, ckpt_file)
    before = snapshot(root)
    cmd = [sys.executable, "-X", "importtime", "-m", "lightning_fed.cli", "fit", "--config", "configs/tiny.yaml"]
    cmd += [f"--trainer.default_root_dir={root}", *QUIET, "--federation.rounds=2", f"--ckpt_path={ckpt_file}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [f"error: ckpt_path {str(ckpt_file)!r}: reference_cache.values has NaN or infinite values"]
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" in imported
    assert not imported & {"lightning", "transformers", "peft"}, sorted(
        imported & {"lightning", "transformers", "peft"}
    )
    assert_unchanged(before, root)


def test_a_resume_stopped_by_the_privacy_budget_before_a_round_keeps_the_earlier_files(tmp_path, private):
    """Red team 11 row 10: a private run resumed with more rounds than its budget allows trains no
    round (exit 0, the stop on stderr) and leaves every file of the earlier run byte for byte
    (its adapter folder was rewritten, target_modules in another order)."""
    earlier_root, overlay, env = private
    root, ckpt_file = _copy(earlier_root, tmp_path)
    before = snapshot(root)
    proc = _fit(root, "--federation.rounds=1000", "--config", str(overlay), f"--ckpt_path={ckpt_file}", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if "stopping:" in line]
    assert warnings == [
        "warning: stopping: round 2 would exceed the privacy budget (federation.privacy.target_epsilon);"
        " no round trained, so the run folder is as the checkpoint's run left it"
    ]
    after = snapshot(root)
    assert {p: after.get(p) for p in before} == before


def test_a_run_whose_last_round_drew_no_client_checkpoints_that_round(tmp_path):
    """Red team 12 row 12 (dp_full, then dp_res_budget): a private run whose last Poisson round drew no
    client left ``last.ckpt`` at the round before (Lightning skips a save while the global step stands);
    the first resume trained that round again, exit 0 with "stopping: round 4 would exceed the privacy
    budget", and rewrote the earlier run's last.ckpt, config.yaml, rounds.jsonl and summary.json.
    Here (seed 0, 4 clients, rate 0.3) round 1 draws clients 2 and 3, round 2 none: the checkpoint holds
    both rounds, and a resume of the finished run leaves every earlier file byte for byte."""
    root = tmp_path / "root"
    poisson = ["--federation.sampling=poisson", "--federation.sampling_rate=0.3", "--federation.rounds=2"]
    proc = _fit(root, *poisson)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = root / "lightning_logs" / "version_0"
    records = [json.loads(line) for line in (folder / "rounds.jsonl").read_text().splitlines()]
    assert [r["clients"] for r in records] == [[2, 3], []]
    ckpt_file = folder / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt_file, weights_only=True)["epoch"] == 1  # round 2's, not round 1's
    before = snapshot(root)
    proc = _fit(root, *poisson, f"--ckpt_path={ckpt_file}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = snapshot(root)
    assert {p: after.get(p) for p in before} == before
