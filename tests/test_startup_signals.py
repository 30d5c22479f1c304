"""SIGTERM / Ctrl-C at any moment of a ``lightning-fed`` process's start-up (issue 41 item 8).

Before, a SIGTERM in the first seconds killed the process by the default action (status -15, no
message), and one during Lightning's import was answered only once the imports ended (683 s
later on a machine at load 40). Each test here sends the signal at a chosen point, without any
timing: a ``sitecustomize`` in the child puts a finder first on ``sys.meta_path`` that signals
its own process when the named module is first looked for, then records every module looked for
after that. A prompt stop looks for none.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOOK = """
import os, signal, sys

# As from a terminal: pytest-xdist's workers ignore SIGINT, and an ignored signal stays ignored
# in the processes they start (the guard leaves an ignored Ctrl-C ignored, as nohup wants).
signal.signal(signal.SIGINT, signal.default_int_handler)

class SignalAt:
    fired = False

    def find_spec(self, name, path=None, target=None):
        if self.fired:
            with open(os.environ["LF_TEST_AFTER"], "a") as log:
                log.write(name + "\\n")
        elif name == os.environ["LF_TEST_SIGNAL_AT"]:
            self.fired = True
            os.kill(os.getpid(), getattr(signal, os.environ["LF_TEST_SIGNAL"]))
        return None

sys.meta_path.insert(0, SignalAt())
"""
NOTHING = "no round completed in this run, so no checkpoint was written by it"
LINES = {
    "SIGTERM": f"lightning-fed: stopped by SIGTERM; {NOTHING}",
    "SIGINT": f"lightning-fed: stopped by SIGINT (Ctrl-C); {NOTHING}",
}


def _start(tmp_path: Path, entry: list[str], args: list[str], at: str, sig: str) -> tuple[int, str, list[str]]:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(HOOK)
    after = tmp_path / "after.txt"
    env = {
        **os.environ,
        "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "LF_TEST_SIGNAL_AT": at,
        "LF_TEST_SIGNAL": sig,
        "LF_TEST_AFTER": str(after),
    }
    for name in ("LIGHTNING_FED_DEBUG", "LIGHTNING_FED_VERBOSE", "LIGHTNING_FED_LIVE_HELP"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, *entry, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    looked_for = after.read_text().split() if after.exists() else []
    return proc.returncode, proc.stderr, looked_for


FIT = ["fit", "--config", "configs/tiny.yaml"]


@pytest.mark.parametrize(
    ("entry", "at", "sig"),
    [
        (["-m", "lightning_fed"], "lightning_fed.cli", "SIGTERM"),  # the package's first module after startup's
        (["-m", "lightning_fed.cli"], "lightning_fed.help_pages", "SIGTERM"),
        (["-m", "lightning_fed.cli"], "torch", "SIGTERM"),
        (["-m", "lightning_fed.cli"], "transformers", "SIGTERM"),
        (["-m", "lightning_fed.cli"], "lightning", "SIGINT"),
    ],
    ids=["sigterm_first_module", "sigterm_before_help_pages", "sigterm_in_torch", "sigterm_in_transformers", "ctrl_c"],
)
def test_a_signal_during_start_up_stops_at_once_with_the_documented_exit(tmp_path, entry, at, sig):
    run = tmp_path / "run"
    code, stderr, looked_for = _start(tmp_path, entry, [*FIT, f"--trainer.default_root_dir={run}"], at, sig)
    assert code == 128 + getattr(signal, sig), stderr[-3000:]
    assert stderr == LINES[sig] + "\n"
    assert looked_for == []  # stopped where it was: no import went on after the signal
    assert not run.exists()


def test_a_signal_while_a_subcommand_module_imports_stops_at_once(tmp_path):
    code, stderr, looked_for = _start(
        tmp_path, ["-m", "lightning_fed.cli"], ["report", str(tmp_path / "none")], "lightning_fed.report.cli", "SIGTERM"
    )
    assert (code, stderr) == (143, "lightning-fed: stopped by SIGTERM; nothing was written\n")  # not fit's line
    assert looked_for == []


def test_a_signal_while_a_resume_starts_names_the_checkpoint_to_resume_from(tmp_path):
    """Red team 11 row 18: a resume stopped before its first round said "no checkpoint was written by
    it", naming none; the checkpoint it resumed is still the one to resume from (trust_boundary.md)."""
    ckpt = tmp_path / "last.ckpt"  # never read: the signal comes before the command line is
    args = [*FIT, f"--trainer.default_root_dir={tmp_path / 'run'}", "--ckpt_path", str(ckpt)]
    code, stderr, _ = _start(tmp_path, ["-m", "lightning_fed.cli"], args, "lightning_fed.help_pages", "SIGTERM")
    assert (code, stderr) == (
        143,
        f"lightning-fed: stopped by SIGTERM; no round completed in this run; resume with --ckpt_path {ckpt}\n",
    )
