"""Bad input refused before torch is imported and before any file is written (issue 41, red team items 2-4).

Before: ``validate --ckpt_path nosuch.ckpt`` got Lightning's raw "Checkpoint file not found"
after ~12 s of CPU, leaving ``lightning_logs/version_0/config.yaml`` and an events file;
``--trainer.devices=0`` exited 1 with a ``MisconfigurationException``, ``--trainer.precision=fp7``
with "Expected a <class 'int'>", ``--trainer.accelerator=tpu`` with torch_xla's
``ModuleNotFoundError``; a config file giving one key twice ran with one of the values. The child
processes here cannot import torch (nor Lightning, transformers, PEFT, pandas), so each line is
shown to come before torch.
"""

from __future__ import annotations

import importlib.util
import subprocess
import typing
from pathlib import Path

import pytest

from lightning_fed.trainer_options import PRECISIONS, trainer_option_problem
from tests.helpers.cli import heavy_blocked_env, lightning_fed


def _cli(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """``lightning-fed <args>`` in an empty folder (returned, to show nothing was written there), torch
    and the other heavy packages unimportable (:func:`tests.helpers.cli.heavy_blocked_env`)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return lightning_fed(*args, cwd=work, env=heavy_blocked_env(tmp_path / "blocked")), work


@pytest.mark.parametrize("stage", ["fit", "validate", "test"])
def test_a_missing_checkpoint_is_named_before_anything_is_written(tmp_path, stage):
    test_set = tmp_path / "test.jsonl"  # `test` without one is refused first (tests/test_stage_sets_cli.py)
    test_set.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n')
    extra = ["--data.init_args.test_dataset", str(test_set)] if stage == "test" else []
    proc, work = _cli(tmp_path, stage, "--config", "tiny", *extra, "--ckpt_path", "nosuch.ckpt")
    assert (proc.returncode, proc.stderr) == (2, "error: ckpt_path 'nosuch.ckpt': no such checkpoint file\n")
    assert list(work.iterdir()) == []


@pytest.mark.parametrize(
    ("option", "line"),
    [
        (
            "--trainer.devices=0",
            "trainer.devices must be a number of devices >= 1, -1 (all of them), 'auto' or a list of device"
            " indices, got 0",
        ),
        (
            "--trainer.precision=fp7",
            "trainer.precision must be one of 64, 32, 16, bf16, 16-true, 16-mixed, bf16-true, bf16-mixed, 32-true,"
            " 64-true, got 'fp7'",
        ),
    ],
    ids=["devices", "precision"],
)
def test_a_trainer_value_the_trainer_refuses_is_exit_2_naming_it(tmp_path, option, line):
    proc, work = _cli(tmp_path, "fit", "--config", "tiny", option)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("devices", ["[0, 1]", "-1"])
def test_device_indices_on_the_cpu_are_exit_2_before_torch(tmp_path, devices):
    """The second outside run: ``trainer.devices: [0, 1]`` on the CPU was Lightning's ``TypeError:
    `devices` selected with `CPUAccelerator` should be an int > 0.`` after the imports (12.6 s of CPU)."""
    config = tmp_path / "cpu.yaml"
    config.write_text(f"trainer:\n  accelerator: cpu\n  devices: {devices}\n", encoding="utf-8")
    proc, work = _cli(tmp_path, "fit", "--config", "tiny", "--config", str(config))
    value = [0, 1] if devices == "[0, 1]" else -1
    line = f"trainer.devices on the CPU must be a number of processes >= 1 or 'auto' (accelerator: cpu), got {value!r}"
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(config)!r}: {line}\n")
    assert list(work.iterdir()) == []


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch_xla installed: tpu is valid")
def test_the_tpu_accelerator_without_torch_xla_is_exit_2_naming_it(tmp_path):
    proc, work = _cli(tmp_path, "fit", "--config", "tiny", "--trainer.accelerator=tpu")
    line = "trainer.accelerator 'tpu' needs the torch_xla package, which is not installed"
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("devices", ["auto", 1, 2, -1, "-1", "1", [0], [0, 1], "0,1", None])
def test_devices_the_trainer_takes_are_accepted(devices):
    assert trainer_option_problem({"devices": devices, "accelerator": "gpu"}) is None


@pytest.mark.parametrize("devices", ["auto", 1, 2, "1", None])
def test_devices_the_cpu_takes_are_accepted(devices):
    assert trainer_option_problem({"devices": devices, "accelerator": "cpu"}) is None


@pytest.mark.parametrize("devices", [-1, "-1", [0], [0, 1], "0,1"])
def test_devices_the_cpu_refuses_are_refused(devices, monkeypatch):
    """Lightning's ``_parse_cpu_cores`` raises ``TypeError`` for these after the imports; refused with
    ``accelerator: cpu``, and with ``auto`` where the installed torch is a CPU build (patched here, so
    the test says the same on a CUDA build)."""
    from lightning_fed import trainer_options

    line = "trainer.devices on the CPU must be a number of processes >= 1 or 'auto'"
    assert trainer_option_problem({"devices": devices, "accelerator": "cpu"}) == (
        f"{line} (accelerator: cpu), got {devices!r}"
    )
    monkeypatch.setattr(trainer_options, "cpu_only_torch", lambda: "2.13.0+cpu")
    assert trainer_option_problem({"devices": devices}) == (
        f"{line} (the installed torch 2.13.0+cpu runs on the CPU alone), got {devices!r}"
    )
    monkeypatch.setattr(trainer_options, "cpu_only_torch", lambda: None)  # a CUDA build: the live Trainer decides
    assert trainer_option_problem({"devices": devices}) is None


@pytest.mark.parametrize("devices", [0, "0", -2, []])
def test_devices_the_trainer_refuses_are_refused(devices):
    assert trainer_option_problem({"devices": devices}).startswith("trainer.devices must be")


def test_the_precisions_are_lightnings():
    """The list is Lightning's ``_PRECISION_INPUT`` less the Transformer Engine ones (left to the Trainer)."""
    from lightning.fabric.connector import _PRECISION_INPUT

    lightnings = {v for literal in typing.get_args(_PRECISION_INPUT) for v in typing.get_args(literal)}
    assert set(PRECISIONS) == {v for v in lightnings if not str(v).startswith("transformer-engine")}


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("federation:\n  rounds: 2\n  rounds: 3\n", "line 3: duplicate key 'rounds' in federation"),
        ("seed_everything: 1\nseed_everything: 2\n", "line 2: duplicate key 'seed_everything' at the top level"),
        (
            "trainer:\n  callbacks:\n  - class_path: a.B\n    init_args: {x: 1, x: 2}\n",
            "line 4: duplicate key 'x' in trainer.callbacks[0].init_args",
        ),
    ],
    ids=["section", "top_level", "nested"],
)
def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path, text, line):
    config = tmp_path / "twice.yaml"
    config.write_text(text)
    proc, work = _cli(tmp_path, "fit", "--config", "tiny", "--config", str(config))
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(config)!r}: {line}\n")
    assert list(work.iterdir()) == []
