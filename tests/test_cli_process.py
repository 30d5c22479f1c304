"""``lightning-fed`` run as a process, the way a user, a script or a scheduler runs it.

Exit status (0 / 1 / 2 / 130 / 143), what is printed, signals and resume. In-process calls of
``main()`` hid that a successful run exited 1; these tests never call it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
ENV.pop("LIGHTNING_FED_DEBUG", None)
QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


def _tiny(root: Path, *extra: str) -> list[str]:
    return ["fit", "--config", "configs/tiny.yaml", f"--trainer.default_root_dir={root}", *QUIET, *extra]


def _popen(args: list[str], **env: str) -> subprocess.Popen:
    # SIGINT restored to its default: a shell that starts pytest in the background ignores it,
    # and a child would inherit that.
    return subprocess.Popen(
        [sys.executable, "-m", "lightning_fed.cli", *args],
        cwd=ROOT,
        env={**ENV, **env},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    proc = _popen(args, **env)
    out, err = proc.communicate(timeout=1800)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in _lines(proc.stderr) if line.startswith("error:")]


def test_help_introduces_the_tool():
    proc = _run(["--help"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: lightning-fed") and "federated fine-tuning" in proc.stdout
    for sub in ("fit", "evaluate", "plan", "--debug", "143"):
        assert sub in proc.stdout


def test_success_exits_0_prints_nothing_extra_and_runs_without_logger_keep_their_own_folders(tmp_path):
    args = _tiny(tmp_path, "--trainer.logger=false", "--federation.rounds=1", "--federation.local_steps=1")
    first = _run(args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "object at 0x" not in first.stdout + first.stderr
    assert "max_epochs` was not set" not in first.stderr  # federation.rounds decides
    assert not _error_lines(first)
    run0 = tmp_path / "lightning_logs" / "version_0"
    kept = {p: p.read_bytes() for p in run0.rglob("*") if p.is_file()}
    assert {"summary.json", "config.yaml"} <= {p.name for p in kept} and (run0 / "adapter").is_dir()

    second = _run(args)  # same default_root_dir, no logger: must not overwrite the first run
    assert second.returncode == 0, second.stderr[-3000:]
    run1 = tmp_path / "lightning_logs" / "version_1"
    assert (
        (run1 / "summary.json").is_file()
        and (run1 / "adapter").is_dir()
        and (run1 / "checkpoints" / "last.ckpt").is_file()
    )
    assert {p: p.read_bytes() for p in run0.rglob("*") if p.is_file()} == kept

    # A truncated last.ckpt: the error names the file and says it is incomplete or corrupt.
    cut = tmp_path / "cut" / "last.ckpt"
    cut.parent.mkdir()
    whole = (run0 / "checkpoints" / "last.ckpt").read_bytes()
    cut.write_bytes(whole[: len(whole) // 2])
    resumed = _run(_tiny(tmp_path / "resumed", f"--ckpt_path={cut}"))
    assert resumed.returncode == 2, resumed.stderr[-3000:]
    (error,) = _error_lines(resumed)
    assert str(cut) in error and "incomplete or corrupt" in error
    assert not (tmp_path / "resumed").exists()


USER_ERRORS = {  # more cases, in-process, in tests/test_bad_input.py
    "unknown_class_path": (
        ["--model=lightning_fed.modules.NoSuchModule"],
        ["model", "unknown class_path", "NoSuchModule"],
    ),
    "missing_local_dataset": (["--data.init_args.dataset=./no_such_dir/train"], ["data.dataset", "no such file"]),
}


@pytest.mark.parametrize(("overrides", "expected"), list(USER_ERRORS.values()), ids=list(USER_ERRORS))
def test_user_error_exits_2_in_one_line_without_traceback(tmp_path, overrides, expected):
    proc = _run(_tiny(tmp_path / "run", *overrides))
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = _error_lines(proc)
    assert len(errors) == 1, proc.stderr[-3000:]
    for part in expected:
        assert part in errors[0], errors[0]
    assert "Traceback" not in proc.stderr and len(errors[0]) < 400
    after = _lines(proc.stderr)[_lines(proc.stderr).index(errors[0]) + 1 :]
    assert len(after) <= 1  # at most a hint line
    assert not (tmp_path / "run").exists()  # failed before writing anything


def test_debug_shows_the_traceback_and_keeps_the_exit_status(tmp_path):
    proc = _run(_tiny(tmp_path, "--model.init_args.lr=.nan"), LIGHTNING_FED_DEBUG="1")
    assert proc.returncode == 2 and "Traceback (most recent call last)" in proc.stderr
    assert _error_lines(proc)[-1] == "error: model.lr must be a finite number, got nan"


def test_training_failure_exits_1_and_still_writes_summary(tmp_path):
    # lr=10 (the bound, lightning_fed/limits.py): every update is beyond the norm bound, the round fails.
    proc = _run(_tiny(tmp_path, "--model.init_args.lr=10", "--federation.max_update_norm=1", "--federation.rounds=2"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = _error_lines(proc)
    assert len(errors) == 1 and "min_clients" in errors[0], proc.stderr[-3000:]
    (run,) = (tmp_path / "lightning_logs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rejected_updates"] == 2 and summary["stopped"]["round"] == 1
    assert len(summary["stopped"]["rejected"]) == 2 and summary["rounds"] == []
    assert summary["config"]["model"]["init_args"]["lr"] == 10.0


def _wait_for(path_glob: str, root: Path, proc: subprocess.Popen, timeout: float = 1800) -> Path:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = sorted(root.glob(path_glob))
        if found:
            return found[0]
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    raise TimeoutError(path_glob)


def _stop_after_round(root: Path, args: list[str], round_number: int, sig: int) -> subprocess.CompletedProcess:
    """Start a run, send ``sig`` once round ``round_number``'s ``last.ckpt`` is written."""
    proc = _popen(args)
    last = _wait_for("lightning_logs/version_*/checkpoints/last.ckpt", root, proc)  # one file, replaced atomically
    while torch.load(last, map_location="cpu", weights_only=True)["epoch"] != round_number - 1:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=1800)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_and_sigterm_save_resume_in_the_same_folder_and_equal_an_uninterrupted_run(tmp_path):
    rounds = ["--federation.rounds=3", "--federation.local_steps=2"]
    straight = _run(_tiny(tmp_path / "straight", *rounds))
    assert straight.returncode == 0, straight.stderr[-3000:]

    root = tmp_path / "stopped"
    run = root / "lightning_logs" / "version_0"
    last = run / "checkpoints" / "last.ckpt"
    interrupted = _stop_after_round(root, _tiny(root, *rounds), 1, signal.SIGINT)
    assert interrupted.returncode == 130, interrupted.stderr[-3000:]
    assert f"resume with --ckpt_path {last}" in interrupted.stderr

    # A resume that would change the result is refused before anything is written.
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    changed = _run(_tiny(root, *rounds, f"--ckpt_path={last}", "--model.init_args.beta=0.1"))
    assert changed.returncode == 2, changed.stderr[-3000:]
    (error,) = _error_lines(changed)
    assert "model.beta: 0.5 -> 0.1" in error and str(last) in error
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before

    terminated = _stop_after_round(root, _tiny(root, *rounds, f"--ckpt_path={last}"), 2, signal.SIGTERM)
    assert terminated.returncode == 143, terminated.stderr[-3000:]
    assert "stopped by SIGTERM" in terminated.stderr

    # What may change on resume (how long the run goes on, logging) is allowed and reported.
    resumed = _run(_tiny(root, *rounds, f"--ckpt_path={last}", "--trainer.log_every_n_steps=7"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "trainer.log_every_n_steps:" in resumed.stderr and "-> 7 (allowed)" in resumed.stderr
    assert sorted(p.name for p in (root / "lightning_logs").iterdir()) == ["version_0"]  # one run, one folder

    ref_run = tmp_path / "straight" / "lightning_logs" / "version_0"
    adapter, ref = (load_file(str(r / "adapter" / "adapter_model.safetensors")) for r in (run, ref_run))
    assert adapter.keys() == ref.keys()
    for k in ref:
        torch.testing.assert_close(adapter[k], ref[k], rtol=1e-5, atol=1e-7)
    rounds_done = json.loads((run / "summary.json").read_text())["rounds"]
    assert [r["round"] for r in rounds_done] == [1, 2, 3]
