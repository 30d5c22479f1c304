"""FederatedRun: the ``federation:`` section as one object, each option declared once, each spec
parsed once, and "is this run private" answered in one place for both transports."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from lightning_fed import run_factory
from lightning_fed.callbacks import FederatedLoop
from lightning_fed.federation.store import ClientStateStore
from lightning_fed.privacy import ClientLevelDP
from lightning_fed.run import FederatedRun
from lightning_fed.strategies import FedAvg, FedProx

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lightning_fed.cli", *args], cwd=ROOT, env=ENV, capture_output=True, text=True
    )


def test_yaml_keys_dataclass_fields_and_help_are_the_same_names():
    declared = [f.name for f in fields(FederatedRun)]
    assert len(declared) == len(set(declared))  # each option declared once
    shown = _cli("fit", "--help")
    assert shown.returncode == 0, shown.stderr
    in_help = set(re.findall(r"^  --federation\.(\w+) ", shown.stdout, flags=re.MULTILINE))
    assert in_help == set(declared)
    printed = _cli("fit", "--config", "configs/tiny.yaml", "--print_config")
    assert printed.returncode == 0, printed.stderr
    assert list(yaml.safe_load(printed.stdout)["federation"]) == declared
    for config in sorted((ROOT / "configs").glob("*.yaml")):  # every shipped config's keys are fields
        section = (yaml.safe_load(config.read_text()) or {}).get("federation") or {}
        assert set(section) <= set(declared), config.name


def test_the_loop_is_built_from_a_run_or_its_settings_never_both():
    run = FederatedRun(rounds=3, local_steps=2, strategy=FedProx(mu=0.1))
    loop = FederatedLoop(run)
    assert loop.run is run and loop.server.strategy is run.strategy
    assert (loop.run.rounds, loop.server.rounds, loop.evaluator.evaluation.rounds) == (3, 3, 3)
    assert isinstance(FederatedLoop(rounds=2).run.strategy, FedAvg)  # the default strategy
    with pytest.raises(TypeError, match=r"^FederatedLoop takes a FederatedRun or its settings, not both"):
        FederatedLoop(run, rounds=2)
    with pytest.raises(ValueError, match=r"^federation.rounds must be in \[1, 1000000\], got 0$"):
        FederatedRun(rounds=0)


def test_the_compression_spec_is_read_from_the_run_in_one_place(monkeypatch):
    """The server's decoder and every turn's encoder are built by ``run_factory.compressor`` from
    ``run.compression`` (no module keeps its own copy of the spec)."""
    calls = []
    original = run_factory.compressor_from_spec

    def counted(spec):
        calls.append(spec)
        return original(spec)

    monkeypatch.setattr(run_factory, "compressor_from_spec", counted)
    run = FederatedRun(rounds=2, compression="int8+ef")
    loop = FederatedLoop(run)
    turns = [run_factory.client_turn(run, c, 0, ClientStateStore(), 8, {}, module=None) for c in range(3)]
    assert calls == ["int8+ef"] * 4
    built = [loop.server.compressor, *(t.compressor for t in turns)]
    assert all(type(c) is type(built[0]) and vars(c) == vars(built[0]) for c in built)
    assert built[0].error_feedback and getattr(built[0], "bits", None) == 8


def test_is_this_run_private_has_one_answer_for_every_turn():
    plain = FederatedRun(rounds=1)
    private = FederatedRun(rounds=1, strategy=ClientLevelDP(FedAvg(), noise_multiplier=1.0, clip_norm=1.0))
    assert not run_factory.is_private(plain, None) and run_factory.is_private(private, None)
    assert not run_factory.client_turn(plain, 0, 0, ClientStateStore(), 5, {}, module=None).private
    turn = run_factory.client_turn(private, 0, 0, ClientStateStore(), 5, {}, module=None)
    assert turn.private and turn.num_examples != 5  # a private client reports a bucketed count
