"""``lightning-fed evaluate`` on files a user hands over: exit 2 with one line naming the file,
never exit 1, never a score of broken weights (issue 22, item 4)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.evaluation.eval_runs import make_run
from tests.helpers.cli import lightning_fed

PROG = "error:"
BENCH = ["--benchmarks", "[lm_eval]", "--lm_eval.tasks", "[lf_arithmetic_mc]", "--lm_eval.limit", "1"]


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):  # noqa: ANN204
        return (open, (self.marker, "w"))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return lightning_fed(*args)


def test_a_crafted_run_checkpoint_exits_2_and_debug_reaches_evaluate(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": {}, "payload": _Payload(marker)}, path)
    proc = _cli("evaluate", "--run", str(path), *BENCH)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith(PROG)]
    assert len(errors) == 1 and errors[0].startswith(
        f"{PROG} --run {str(path)!r}: not a safe, complete checkpoint: the file is incomplete or corrupt,"
        " or holds objects that weights_only=True refuses (UnpicklingError:"
    ), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and not marker.exists()
    debug = _cli("--debug", "evaluate", "--run", str(path), *BENCH)  # was stripped before dispatch
    assert debug.returncode == 2 and "Traceback (most recent call last)" in debug.stderr, debug.stderr[-3000:]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("evaluate") / "version_0"
    make_run(root)
    return root


def _broken(run: Path, tmp_path: Path, change) -> Path:
    copy = tmp_path / "version_0"
    (copy / "adapter").mkdir(parents=True)
    (copy / "config.yaml").write_bytes((run / "config.yaml").read_bytes())
    (copy / "adapter" / "adapter_config.json").write_bytes((run / "adapter" / "adapter_config.json").read_bytes())
    tensors = load_file(str(run / "adapter" / "adapter_model.safetensors"))
    key = next(k for k in tensors if ".lora_B." in k)
    tensors[key] = change(tensors[key])
    save_file(tensors, str(copy / "adapter" / "adapter_model.safetensors"))
    return copy, key


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: torch.full_like(t, float("nan")), "has NaN or infinite values"),  # was scored, exit 0
        (lambda t: torch.zeros(t.shape[0] + 3, t.shape[1]), "the adapter does not fit the model"),  # was exit 1
    ],
    ids=["nan", "wrong_shape"],
)
def test_a_broken_adapter_exits_2_naming_it(run, tmp_path, capsys, change, message):
    from lightning_fed.evaluation.cli import main

    copy, key = _broken(run, tmp_path, change)
    assert main(["--run", str(copy), *BENCH]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith(PROG)]
    assert str(copy / "adapter") in line and message in line, line
    assert not (copy / "eval_results.json").exists()
