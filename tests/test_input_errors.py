"""Input problems outside the usual error classes are exit 2 with one line naming what to fix
(issue 22, item 9): a binary config, a read-only output folder, a LoRA rank no layer has, a
scalar where a class's options go."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from lightning_fed.errors import exit_code
from tests.helpers.cli import ENV, ROOT
from tests.helpers.cli import lightning_fed as _cli


def _errors(proc: subprocess.CompletedProcess, prefix: str = "error:") -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith(prefix)]


@pytest.fixture
def binary(tmp_path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"model: \xff\xfe\x00binary")
    return path


def test_a_binary_config_is_named(tmp_path, binary):
    proc = _cli("fit", "--config", str(binary), f"--trainer.default_root_dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [f"error: config {str(binary)!r} is not UTF-8 text (byte 7: invalid start byte)"]
    plan = _cli("plan", "--config", str(binary))
    assert plan.returncode == 2, plan.stderr[-3000:]
    assert _errors(plan) == [f"error: config {str(binary)!r} is not UTF-8 text (byte 7: invalid start byte)"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        # was "unknown class_path 'lightning_fed.modules.DPOModule'" (the word "import" in the reason),
        # then "model.lora: Expected a dot import path string: big" (issue 34 item 10)
        (
            "--model.init_args.lora=big",
            "error: model.lora must be a mapping with keys r, alpha, dropout, target_modules, got 'big'",
        ),
        (
            "--model.init_args.backbone=big",
            "error: model.backbone must be a mapping with keys name_or_path, config, tokenizer, dtype, cache_dir,"
            " quantization, activation_checkpointing, got 'big'",
        ),
        # was an allocation failure (exit 1) naming no option
        (
            "--model.init_args.lora.r=100000000",
            "error: model.lora.r must be <= 32 (the full rank of the largest target module), got 100000000",
        ),
    ],
    ids=["lora_scalar", "backbone_scalar", "huge_rank"],
)
def test_model_options_are_named(tmp_path, override, message):
    proc = _cli("fit", "--config", "configs/tiny.yaml", f"--trainer.default_root_dir={tmp_path / 'run'}", override)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [message]
    assert not (tmp_path / "run").exists()


def test_a_scalar_lora_in_a_config_file_is_named_with_its_keys(tmp_path):
    """Issue 34 item 10: ``lora: 5`` in YAML said "Not a valid subclass of LoraSettings"."""
    config = tmp_path / "lora.yaml"
    config.write_text("model:\n  init_args:\n    lora: 5\n")
    root = tmp_path / "run"
    proc = _cli("fit", "--config", "configs/tiny.yaml", "--config", str(config), f"--trainer.default_root_dir={root}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr == (
        f"error: config '{config}': model.lora must be a mapping with keys r, alpha, dropout, target_modules, got 5\n"
    )  # one line, naming the file (a UserError has no --debug hint since 38695c7)
    assert not root.exists()


@pytest.mark.parametrize("number", [errno.EROFS, errno.EACCES, errno.ENAMETOOLONG])
def test_an_unusable_path_before_training_is_a_user_error(number):
    err = OSError(number, os.strerror(number), "/runs/x")
    assert exit_code(err, training_started=False) == 2
    assert exit_code(err, training_started=True) == 1  # a disk that fails mid-run is a failure
    assert exit_code(OSError(errno.EIO, "I/O error"), training_started=False) == 1


def test_predict_is_removed_with_what_to_use_instead(tmp_path):
    """Issue 22 item 10: `predict` on a DPO module exited 1 ("requires forward")."""
    proc = _cli("predict", "--config", "configs/tiny.yaml", f"--trainer.default_root_dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [
        "error: `lightning-fed predict` was removed: the objectives here score pairs and have no forward to predict"
        " with; generate answers to a prompts file with `lightning-fed evaluate --run <run> --benchmarks [judge]`"
        " (or [humaneval], [lm_eval])"
    ]
    assert not (tmp_path / "run").exists()
    assert "predict" not in _cli("--help").stdout


@pytest.mark.parametrize("flag", [["--debug", "false"], ["--debug=false"], ["--debug", "true"], ["--debug=true"]])
def test_debug_takes_a_boolean_after_the_subcommand(tmp_path, flag):
    """Issue 34 item 8: `--debug false` turned debug on and left `false` as a stray argument
    (exit 2 with a traceback and jsonargparse's DEBUG log lines); only `--debug=true` worked."""
    missing = tmp_path / "no-run"
    proc = _cli("evaluate", "--run", str(missing), "--benchmarks", "[judge]", *flag)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = (
        f"error: --run {str(missing)!r}: no such file or folder; --judge: set exactly one of"
        " --judge.url (with --judge.model), --judge.model or --judge.backbone, got none"
    )
    assert " - DEBUG - " not in proc.stderr
    if flag[-1].endswith("false"):
        assert proc.stderr == f"{line}\n"
    else:
        assert "Traceback (most recent call last)" in proc.stderr and proc.stderr.endswith(f"\n{line}\n")


def _read_only_folder() -> Path:
    """A folder nobody can create files in, root included (``/sys`` is mounted so); else skip."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir="/sys"):
            pass
    except OSError:
        return Path("/sys")
    pytest.skip("/sys is writable here")


def test_a_read_only_root_dir_is_named_by_its_option():
    """Issue 34 (also seen): the read-only ``fit`` message did not name trainer.default_root_dir."""
    root = _read_only_folder() / "lf-run"
    proc = _cli("fit", "--config", "configs/tiny.yaml", f"--trainer.default_root_dir={root}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [f"error: trainer.default_root_dir '{root}': cannot write into '/sys' (Permission denied)"]
    assert len(proc.stderr.splitlines()) == 1  # made before torch: no --debug hint


def test_evaluate_output_read_only_is_refused_before_the_model_loads(tmp_path):
    """Issue 34 item 6: ``evaluate --output <read-only>`` exited 1 after loading the model."""
    output = _read_only_folder() / "lf-results"
    adapter = tmp_path / "adapter"  # never read: --output is checked with the other options
    proc = _cli("evaluate", "--run", str(adapter), "--benchmarks", "[judge]", "--judge.model=x", f"--output={output}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr == (
        f"error: --run {str(adapter)!r}: no such file or folder;"
        f" --output '{output}': cannot write into '/sys' (Permission denied)\n"
    )


@pytest.mark.parametrize(
    ("given", "line"),
    [
        (
            "no-such-name",
            "error: --config 'no-such-name': no such file, and no shipped config of that name"
            " (`lightning-fed configs` lists them)",
        ),
        ("", "error: --config '' is empty: give a config file or a shipped name (`lightning-fed configs` lists them)"),
    ],
    ids=["unknown_name", "empty"],
)
def test_a_config_that_names_nothing_points_at_the_shipped_list(tmp_path, given, line):
    """Issue 34 (also seen): "File does not exist: '<cwd>/no-such-name'" and "Unexpected config:"."""
    proc = _cli("fit", "--config", given, f"--trainer.default_root_dir={tmp_path / 'run'}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [line] and len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_validate_of_a_checkpoint_in_a_read_only_run_folder_is_refused_first(tmp_path):
    """Issue 34 item 6: ``validate`` of a checkpoint in a read-only run folder ran the whole
    evaluation, then exited 2 without its metrics (``validate_results.json`` goes into the
    checkpoint's run folder, outside ``default_root_dir``). As root no folder is read-only by its
    mode, so the run folder is made unwritable for the child process by a ``sitecustomize``."""
    trained = tmp_path / "trained"
    fit = _cli(
        "fit",
        "--config",
        "configs/tiny.yaml",
        f"--trainer.default_root_dir={trained}",
        "--federation.rounds=1",
        "--federation.local_steps=1",
        "--trainer.enable_progress_bar=false",
    )
    assert fit.returncode == 0, fit.stderr[-3000:]
    run = trained / "lightning_logs" / "version_0"
    ckpt = run / "checkpoints" / "last.ckpt"
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import errno, os, tempfile\n"
        "_made = tempfile.TemporaryFile\n"
        "def _refuse(*args, dir=None, **kwargs):\n"
        f"    if dir is not None and os.path.abspath(dir) == {str(run)!r}:\n"
        "        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(dir))\n"
        "    return _made(*args, dir=dir, **kwargs)\n"
        "tempfile.TemporaryFile = _refuse\n"
    )
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    root = tmp_path / "elsewhere"
    proc = _cli(
        *["validate", "--config", "configs/tiny.yaml", f"--ckpt_path={ckpt}", f"--trainer.default_root_dir={root}"],
        "--trainer.enable_progress_bar=false",
        env={**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}"},
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _errors(proc) == [
        f"error: ckpt_path '{ckpt}': validate writes validate_results.json into its run folder:"
        f" cannot write into '{run}' (Permission denied)"
    ]
    assert len(proc.stderr.splitlines()) == 1, proc.stderr[-3000:]
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before and not root.exists()
