"""A mistyped key, an abbreviated option or broken YAML: one line, exit 2, before torch (issue 41 items 8, 9, 12).

Before, ``local_step: 5`` in a config file said ``Subcommand 'fit' does not accept option
'federation.local_step'`` (neither the file nor ``local_steps``) after 17-20 s of CPU spent
importing torch, and ``--federation.local_step=2`` on the command line was silently taken as
``local_steps`` (argparse's abbreviations). The child processes here cannot import torch (a
``sitecustomize`` refuses it), so each message is shown to come before torch is imported.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from lightning_fed.config_precheck import Options
from lightning_fed.help_pages import stored
from tests.helpers.cli import ENV, ROOT, lightning_fed_without_torch, run_process

TINY = (ROOT / "configs" / "tiny.yaml").read_text()


def _cli(tmp_path: Path, *args: str):
    """``lightning-fed ARGS`` from ``tmp_path``, torch unimportable, the run folder ``tmp_path/run``."""
    root = f"--trainer.default_root_dir={tmp_path / 'run'}"
    return lightning_fed_without_torch(*args, root, cwd=tmp_path, hook=tmp_path / "hook")


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "my_run.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (
            ("local_steps: 5", "local_step: 5"),
            "unknown key federation.local_step; did you mean federation.local_steps?",
        ),
        (("trainer:", "trainr:"), "unknown key trainr; did you mean trainer?"),
        (("seed_everything: 0", "seed_everythin: 0"), "unknown key seed_everythin; did you mean seed_everything?"),
        (
            ("  enable_model_summary: false", "  enable_model_sumary: false"),
            "unknown key trainer.enable_model_sumary; did you mean trainer.enable_model_summary?",
        ),
    ],
    ids=["federation", "section", "top_level", "trainer"],
)
def test_a_key_error_in_a_config_file_names_the_file_and_the_close_key(tmp_path, edit, line):
    path = _config(tmp_path, TINY.replace(*edit))
    proc = _cli(tmp_path, "fit", "--config", path)
    assert (proc.returncode, proc.stderr) == (2, f"error: config {path!r}: {line}\n")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("form", [["--federation.local_step=2"], ["--federation.local_step", "2"]])
def test_an_abbreviated_option_is_refused_with_the_option_it_abbreviates(tmp_path, form):
    proc = _cli(tmp_path, "fit", "--config", "tiny", *form)
    assert (proc.returncode, proc.stderr) == (
        2,
        "error: unknown option --federation.local_step for `lightning-fed fit`;"
        " did you mean --federation.local_steps?\n",
    )


def test_the_live_parser_refuses_abbreviations_too(tmp_path, monkeypatch):
    """The same refusal where the stored page cannot serve (another Lightning, a plugin): no
    abbreviation reaches argparse's prefix matching (``allow_abbrev=False``)."""
    monkeypatch.setenv("LIGHTNING_FED_LIVE_HELP", "1")
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import lightning_fed.help_pages as h\nh.stored_page = lambda subcommand: None\n"
    )
    env = {**ENV, "PYTHONPATH": f"{hook}{os.pathsep}{ROOT}", "LIGHTNING_FED_LIVE_HELP": "1"}
    cmd = [sys.executable, "-m", "lightning_fed", "fit", "--config", "tiny", "--federation.local_step=2"]
    proc = run_process([*cmd, "--print_config"], cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert proc.stderr.splitlines()[0] == "error: unrecognized arguments: --federation.local_step=2"


def test_broken_yaml_is_named_by_file_line_and_column(tmp_path):
    path = _config(tmp_path, "federation:\n  rounds: [1\n")
    proc = _cli(tmp_path, "fit", "--config", path)
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: config {path!r} is not valid YAML at line 3, column 1: expected ',' or ']', but got '<stream end>'\n",
    )


def test_an_unknown_shipped_name_is_refused_before_torch(tmp_path):
    proc = _cli(tmp_path, "validate", "--config", "tiny_typo")
    assert proc.returncode == 2
    assert proc.stderr == (
        "error: --config 'tiny_typo': no such file, and no shipped config of that name"
        " (did you mean `--config tiny`?)\n"
    )


def test_keys_below_a_class_and_mappings_of_an_option_are_left_to_the_live_parser():
    """``init_args`` depend on the class; ``trainer.max_time: {hours: 1}`` is one option's value."""
    options = Options(stored()["pages"]["fit"])
    config = {
        "model": {"class_path": "DPOModule", "init_args": {"anything": 1}},
        "trainer": {"max_time": {"hours": 1}, "callbacks": [{"class_path": "x", "init_args": {"y": 1}}]},
        "federation": {"strategy": {"class_path": "FedProx", "init_args": {"mu": 0.1}}, "rounds": 2},
    }
    assert list(options.unknown_keys(config)) == []
    assert options.known("model.init_args.lr") and options.known("federation.strategy.init_args.mu")
    assert list(options.unknown_keys({"federation": {"round": 2}, "trainer": {"max_epoch": 1}})) == [
        "federation.round",
        "trainer.max_epoch",
    ]
