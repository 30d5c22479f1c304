"""Start-up time of ``lightning-fed``: ``--help``, each subcommand's ``--help`` and config errors.

Runs each command ``--repeat`` times as a fresh process and prints the median wall time and the
median process CPU time (user + system of the child; steadier than wall time on a shared
machine). ``--rev REV`` also measures the package as it was at a git revision (exported with
``git archive`` into a temporary folder and put first on ``PYTHONPATH``), in the same run, so
the two can be compared as a ratio::

    .venv/bin/python benchmarks/cli_startup.py --rev 7af9c5c --repeat 5

``--installed VENV`` measures a pip install instead (the ``lightning-fed`` console script of
``VENV``, run from an empty folder, nothing on ``PYTHONPATH``): the wheel as a user gets it,
with the library versions pip resolved (docs/get-started/install.md)::

    python -m venv /tmp/v && /tmp/v/bin/pip install torch==2.13.0
    /tmp/v/bin/pip install "dist/lightning_fed-0.1.0-py3-none-any.whl[flower,eval,offline-models]"
    .venv/bin/python benchmarks/cli_startup.py --installed /tmp/v --repeat 3

The targets of issues 21 and 33 (``--help`` and every subcommand's ``--help`` under 1.5 s of
process time, an argument error before any model import) are checked by the tests only as
"imports nothing heavy" (``tests/test_console.py``, ``tests/test_cli_help.py``: the subcommands'
pages are stored, :mod:`lightning_fed.help_pages`); times are reported here, never asserted.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {
    "--help": ["--help"],
    "fit --help": ["fit", "--help"],
    "report --help": ["report", "--help"],
    "evaluate --help": ["evaluate", "--help"],
    "plan --help": ["plan", "--help"],
    "bad argument": ["flower", "clientapp", "--runtime-api-address", "nope", "--insecure"],
    "config key error": ["fit", "--config", "tiny", "--federation.local_step=2", "--trainer.default_root_dir=/x"],
    "config file error": ["fit", "--config", "broken.yaml", "--trainer.default_root_dir=/x"],
    "config value error": ["fit", "--config", "tiny", "--model.init_args.lr=-1", "--trainer.default_root_dir=/x"],
    "class check error": [
        "fit",
        "--config",
        "fedbiscuit_tiny",
        "--federation.strategy.num_selectors=4",
        "--trainer.default_root_dir=/x",
    ],
    "lora key error": ["fit", "--config", "tiny", "--model.init_args.lora.alpha=nan", "--trainer.default_root_dir=/x"],
    "model check error": [
        "fit",
        "--config",
        "tiny",
        "--model.init_args.lora.r=100000000",
        "--trainer.default_root_dir=/x",
    ],
    "evaluate error": ["evaluate", "--run", "/nonexistent/run", "--benchmarks", "[lm_eval]"],
}
_R = "--trainer.default_root_dir=run"  # in the command's temporary folder: a tree that accepts the value trains there
CONFIG_ERRORS = {  # issue 41: "a config error <= 3 s of CPU" (tests/test_class_options_cli.py)
    "missing config": ["fit", "--config", "nosuch.yaml"],
    "data template": ["fit", "--config", "tiny", "--data.init_args.template=nope", _R],
    "data partition": ["fit", "--config", "tiny", "--data.init_args.partition=Nope", _R],
    "backbone dtype": ["fit", "--config", "tiny", "--model.init_args.backbone.dtype=float8", _R],
    "seed word": ["fit", "--config", "tiny", "--seed_everything=abc", _R],
    "loss name": ["fit", "--config", "tiny", "--model.init_args.loss=nosuchloss", _R],
    "synthetic set": ["fit", "--config", "tiny", "--data.init_args.dataset=synthetic:nope", _R],
    "logger word": ["fit", "--config", "tiny", "--trainer.logger=maybe", _R],
    "model key": ["fit", "--config", "tiny", "--model.init_args.zzz=3", _R],
    "lora rank": ["fit", "--config", "tiny", "--model.init_args.lora.r=64", _R],
    "max_length": ["fit", "--config", "tiny", "--data.init_args.max_length=1000", _R],
    # tests/test_argument_errors_cli.py: Lightning's trainer.* types, a class_path typo, the arguments' shape
    "trainer type": ["fit", "--config", "tiny", "--trainer.max_epochs=abc", _R],
    "trainer accelerator": ["fit", "--config", "tiny", "--trainer.accelerator=gpux", _R],
    "trainer devices": ["fit", "--config", "tiny", "--trainer.devices=abc", _R],
    "class_path typo": ["fit", "--config", "tiny", "--model.class_path=lightning_fed.modules.FedDPOModul", _R],
    # tests/test_class_paths_cli.py: a class_path naming no class, Lightning's named trainer.* values
    "strategy class typo": ["fit", "--config", "tiny", "--federation.strategy=FedAdm", _R],
    "hook class typo": ["fit", "--config", "tiny", "--federation.hooks=[ClientGroupin]", _R],
    "logger class typo": ["fit", "--config", "tiny", "--trainer.logger=TensorBoardLoger", _R],
    "callback class typo": ["fit", "--config", "tiny", "--trainer.callbacks=ModelCheckpont", _R],
    "data os.system": ["fit", "--config", "tiny", "--data.class_path=os.system", _R],
    "devices list in file": ["fit", "--config", "tiny", "--config", "devices.yaml", _R],
    "gradient clip nan": ["fit", "--config", "tiny", "--trainer.gradient_clip_val=nan", _R],
    "trainer strategy": ["fit", "--config", "tiny", "--trainer.strategy=ddpp", _R],
    "trainer plugins": ["fit", "--config", "tiny", "--trainer.plugins=foo", _R],
    "trainer profiler": ["fit", "--config", "tiny", "--trainer.profiler=nope", _R],
    "trainer max_time": ["fit", "--config", "tiny", "--trainer.max_time=abc", _R],
    "val_check_interval": ["fit", "--config", "tiny", "--trainer.val_check_interval=abc", _R],
    "option without value": ["fit", "--config", "tiny", "--federation.rounds"],
    "stray word": ["fit", "--config", "tiny", "foo"],
    "no config": ["fit"],
}
COMMANDS.update(CONFIG_ERRORS)
BROKEN = "federation:\n  rounds: [1\n"
"""``broken.yaml``, written into the folder each command runs in (a YAML syntax error)."""
DEVICES = "trainer:\n  devices: [0, x]\n"
"""``devices.yaml``, written beside it (device indices with a word among them)."""


def subcommand_errors() -> dict[str, list[str]]:
    """``plan``, ``report`` and ``evaluate`` argument and config errors (issue 41: each <= 3 s of CPU).

    Their inputs (a config with ``batch_clients: x``, an adapter with ``lora_alpha: 1e300``) are
    written once into a temporary folder, named by absolute path.
    """
    folder = Path(tempfile.mkdtemp(prefix="cli_startup_"))
    tiny = (ROOT / "lightning_fed" / "configs" / "tiny.yaml").read_text()
    (folder / "batch_clients_x.yaml").write_text(tiny.replace("rounds: 3", "rounds: 3\n  batch_clients: x"))
    adapter = folder / "alpha_adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"r": 4, "lora_alpha": 1e300, "peft_type": "LORA"}')
    return {
        "plan option error": ["plan", "--config", "tiny", "--batch-size", "0"],
        "plan length error": ["plan", "--config", "tiny", "--max-length", str(10**12)],
        "plan config error": ["plan", "--config", str(folder / "batch_clients_x.yaml")],
        "plan unknown config": ["plan", "--config", "nosuch"],
        "report no run": ["report", "nosuchdir"],
        "report out error": ["report", "nosuchdir", "--out", "/proc/x"],
        "evaluate unknown option": ["evaluate", "--bogus", "1"],
        "evaluate list without brackets": ["evaluate", "--run", "r", "--benchmarks", "judge"],
        "evaluate alpha error": [
            "evaluate",
            "--model",
            "distilgpt2",
            "--adapter",
            str(adapter),
            "--benchmarks",
            "[lm_eval]",
            "--lm_eval.tasks",
            "[hellaswag]",
        ],
    }


def _time(args: list[str], tree: Path) -> tuple[float, float, int]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    if (tree / "bin" / "lightning-fed").is_file():  # an installed venv: its console script
        env.pop("PYTHONPATH", None)
        cmd = [str(tree / "bin" / "lightning-fed")]
    else:  # the tree measured first on the path
        env["PYTHONPATH"] = str(tree)
        cmd = [sys.executable, "-m", "lightning_fed.cli"]
    cwd = Path(tempfile.mkdtemp())  # an empty folder but for broken.yaml and devices.yaml
    (cwd / "broken.yaml").write_text(BROKEN)
    (cwd / "devices.yaml").write_text(DEVICES)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([*cmd, *args], cwd=cwd, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def measure(tree: Path, repeat: int) -> dict[str, tuple[float, float, int]]:
    out = {}
    for name, args in COMMANDS.items():
        runs = [_time(args, tree) for _ in range(repeat)]
        out[name] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[-1][2])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per command (median reported)")
    parser.add_argument("--rev", default=None, help="also measure the package at this git revision (e.g. 7af9c5c)")
    parser.add_argument("--installed", default=None, help="measure this virtualenv's lightning-fed instead of the tree")
    parser.add_argument("--only", nargs="*", default=None, help="measure only these commands (names as printed)")
    args = parser.parse_args()
    COMMANDS.update(subcommand_errors())
    for name in set(COMMANDS) - set(args.only or COMMANDS):
        del COMMANDS[name]
    trees = {"installed": Path(args.installed)} if args.installed else {"now": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        if args.rev:
            archive = subprocess.run(
                ["git", "archive", args.rev, "lightning_fed"], cwd=ROOT, capture_output=True, check=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            trees = {args.rev: Path(tmp), **trees}
        results = {label: measure(path, args.repeat) for label, path in trees.items()}
    print(f"{'command':<20}" + "".join(f"{label + ' wall/cpu s (exit)':>34}" for label in results))
    for name in COMMANDS:
        cells = "".join(f"{f'{r[name][0]:.2f} / {r[name][1]:.2f} ({r[name][2]})':>34}" for r in results.values())
        print(f"{name:<20}{cells}")
    if args.rev:
        before, after = results[args.rev], results["installed" if args.installed else "now"]
        ratios = " ".join(f"{name.replace(' ', '_')}={after[name][1] / before[name][1]:.2f}" for name in COMMANDS)
        print(f"cli_startup: cpu_ratio_now_vs_{args.rev} {ratios}")


if __name__ == "__main__":
    main()
