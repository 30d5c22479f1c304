"""``federation.batch_clients: auto`` (the default): the K it chose is recorded in the run's config,
and a rerun of that config or a resume trains with it, whatever the memory holds then (issue 43)."""

from __future__ import annotations

import json

import yaml

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.federation import FederationConfig
from lightning_fed.federation.resume_check import compare_configs
from tests.batching.test_parity import sft_data, sft_module
from tests.helpers.cli import lightning_fed
from tests.helpers.runs import fit

ARGS = ("--trainer.enable_progress_bar=false", "--federation.local_steps=1")


def test_auto_is_the_default():
    assert FederationConfig().batch_clients == "auto"


def test_the_cli_records_k_and_a_resume_trains_with_it(tmp_path):
    """One round of ``tiny`` (2 clients a round: ``auto`` picks K = 2), then a resume to round 2:
    K is said once at start, recorded in ``config.yaml`` and ``summary.json``; the resume says it
    trains with the recorded K and reports no change of ``batch_clients``."""
    root = tmp_path / "runs"
    first = lightning_fed(
        "fit", "--config", "tiny", f"--trainer.default_root_dir={root}", *ARGS, "--federation.rounds=1"
    )
    assert first.returncode == 0, first.stderr[-3000:]
    said = [line for line in first.stderr.splitlines() if "batch_clients" in line]
    assert said == ["federation.batch_clients: auto: clients trained together K = 2"]
    run = root / "lightning_logs" / "version_0"
    assert yaml.safe_load((run / "config.yaml").read_text())["federation"]["batch_clients"] == 2
    assert json.loads((run / "summary.json").read_text())["config"]["federation"]["batch_clients"] == 2

    ckpt = run / "checkpoints" / "last.ckpt"
    resumed = lightning_fed(
        "fit", "--config", "tiny", f"--trainer.default_root_dir={root}", *ARGS, "--federation.rounds=2",
        f"--ckpt_path={ckpt}",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    said = [line for line in resumed.stderr.splitlines() if "batch_clients" in line]
    assert said == ["federation.batch_clients: auto: clients trained together K = 2 (recorded by the run resumed)"]

    rerun = lightning_fed(
        "fit", "--config", str(run / "config.yaml"), f"--trainer.default_root_dir={tmp_path / 'rerun'}",
        "--federation.rounds=1", "--ckpt_path=null",  # config.yaml records the resume's ckpt_path (2 rounds)
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    said = [line for line in rerun.stderr.splitlines() if "batch_clients" in line]
    assert said == ["federation.batch_clients: 2: clients trained together K = 2"]


def test_a_resume_whose_planner_picks_another_k_uses_the_recorded_one(tmp_path, monkeypatch):
    """The planner said 2 for the first part (other tenants' memory); at the resume it would say 4:
    the resume trains in groups of 2, as the run it continues."""
    import lightning_fed.callbacks.federated_loop as loop_module

    monkeypatch.setattr(loop_module, "run_group_size", lambda *a: 2)
    loop = FederatedLoop(rounds=1, clients_per_round=4, local_steps=1, seed=0, save_adapter=False)
    fit(sft_module(), sft_data(), loop, str(tmp_path), limit_val_batches=0)
    assert loop.group_size == 2 and loop.state_dict()["batch_clients"] == 2

    monkeypatch.setattr(loop_module, "run_group_size", lambda *a: 4)
    resumed = FederatedLoop(rounds=2, clients_per_round=4, local_steps=1, seed=0, save_adapter=False)
    fit(sft_module(), sft_data(), resumed, str(tmp_path), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert resumed.group_size == 2
    assert [len(g) for g in resumed.next_round().groups] == [2, 2]

    fresh = FederatedLoop(rounds=1, clients_per_round=4, local_steps=1, seed=0, save_adapter=False)
    fit(sft_module(), sft_data(), fresh, str(tmp_path / "fresh"), limit_val_batches=0)
    assert fresh.group_size == 4  # without a run to continue: the planner's K


def test_auto_against_its_recorded_k_is_not_a_change():
    old = {"federation": {"batch_clients": 4, "rounds": 1}}
    assert compare_configs(old, {"federation": {"batch_clients": "auto", "rounds": 2}}) == (
        [],
        ["federation.rounds: 1 -> 2"],
    )
    assert compare_configs(old, {"federation": {"batch_clients": 2, "rounds": 1}}) == (
        [],
        ["federation.batch_clients: 4 -> 2"],
    )
