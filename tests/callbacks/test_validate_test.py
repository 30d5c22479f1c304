"""`lightning-fed validate` and `lightning-fed test` after `fit`, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).parents[2]
TINY_BACKBONE = {
    "config": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 512},
    "tokenizer": "bytes",
}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "lightning_fed.cli", *args, "--trainer.enable_progress_bar=false"]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"{args[0]} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def fit_then_evaluate(tmp_path: Path, config: dict) -> Path:
    """fit (1 round), then test and validate from the run's config and last.ckpt; the run folder."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    cli("fit", "--config", str(path), cwd=tmp_path)
    (run,) = [p.parent for p in tmp_path.rglob("summary.json")]
    saved, ckpt = str(run / "config.yaml"), str(run / "checkpoints" / "last.ckpt")
    proc = cli("test", "--config", saved, "--ckpt_path", ckpt, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert "test/pref_acc_norm" in out and "test_results.json" in out
    cli("validate", "--config", saved, "--ckpt_path", ckpt, cwd=tmp_path)
    return run


def test_feddpo_own_data_with_chat_template(tmp_path):
    """configs/own_data.yaml (ByKey on a local JSONL, chat template, a test file) on a tiny model."""
    config = yaml.safe_load((ROOT / "configs" / "own_data.yaml").read_text())
    config["model"]["init_args"]["backbone"] = TINY_BACKBONE
    config["model"]["init_args"]["lr"] = 0.005
    data = config["data"]["init_args"]
    data["dataset"], data["test_dataset"] = str(ROOT / data["dataset"]), str(ROOT / data["test_dataset"])
    data["max_length"] = 200  # the byte tokenizer: the detailed answers do not fit, truncated
    # ... to a completion budget that leaves the prompt room (without it, every pair of a client
    # would keep under data.min_prompt_length of its prompt and be dropped)
    data["max_completion_length"] = 120
    config["federation"].update(rounds=1, local_steps=2)
    config["trainer"] = {"default_root_dir": str(tmp_path / "runs"), "enable_model_summary": False}
    run = fit_then_evaluate(tmp_path, config)

    test = json.loads((run / "test_results.json").read_text())
    assert test["stage"] == "test" and test["round"] == 1 and test["num_examples"] == 12
    for key in (
        "pref_acc",
        "pref_acc_sum",
        "pref_acc_norm",
        "pref_acc_sum_client_mean",
        "pref_acc_norm_client_min",
        "loss",
    ):
        assert 0.0 <= test["metrics"][key] or key == "loss", key
    # ByKey on `user`: clients are the users in sorted order, each with its 3 held-out questions.
    assert {c: m["num_examples"] for c, m in test["clients"].items()} == {"0": 3, "1": 3, "2": 3, "3": 3}
    assert sorted(test["groups"]) == ["ana", "ben", "chen", "dara"]
    assert test["groups"]["ben"]["pref_acc_sum"] == test["clients"]["1"]["pref_acc_sum"]
    assert sum(test["data"]["truncated"]["test"]) > 0 and test["data"]["truncation"] == "prompt_middle"
    validate = json.loads((run / "validate_results.json").read_text())
    assert validate["stage"] == "validate" and validate["num_examples"] == 8 and "pref_acc_norm" in validate["metrics"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["data"]["truncated"]["train"] == test["data"]["truncated"]["train"]
    assert (run / "events.out.tfevents").exists() or any(run.glob("events.out.tfevents.*"))


def test_fedpdpo_is_tested_with_each_clients_personal_parts(tmp_path):
    """FedPDPO: `test` scores every client with its own personal adapter, heads and scale."""
    config = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    config["model"] = {
        "class_path": "lightning_fed.modules.PDPOModule",
        "init_args": {
            **config["model"]["init_args"],
            "bottleneck_dim": 16,
            "reward_hidden": 32,
            "bottleneck_dropout": 0.0,
            "reward_dropout": 0.0,
            "lr_h": 0.01,
        },
    }
    data = config["data"]["init_args"]
    data["synthetic_args"].update(examples_per_client=12, groups=["positive", "negative"])
    data["test_dataset"] = "synthetic:preferences"
    config["federation"].update(rounds=1, clients_per_round=4, local_steps=2)
    config["trainer"] = {"default_root_dir": str(tmp_path / "runs"), "enable_model_summary": False, "logger": False}
    run = fit_then_evaluate(tmp_path, config)
    test = json.loads((run / "test_results.json").read_text())
    assert sorted(test["groups"]) == ["negative", "positive"] and test["num_examples"] == 48
    assert {"pref_acc", "pref_acc_sum", "pref_acc_norm", "logp_margin"} <= set(test["metrics"])
    assert (run / "validate_results.json").is_file()

    # Recompute client by client by hand: global state + that client's personal state.
    import lightning.pytorch as pl

    from lightning_fed.datamodules import PreferenceDataModule
    from lightning_fed.federation import ClientStateStore
    from lightning_fed.modules import PDPOModule

    pl.seed_everything(config["seed_everything"])  # the tiny backbone is random: built as the CLI builds it
    module, dm = PDPOModule(**config["model"]["init_args"]), PreferenceDataModule(**data)
    dm.tokenizer = module.tokenizer
    dm.setup("test")
    fed = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["federation"]
    store = ClientStateStore()  # the checkpoint references each client's file in <run>/client_states
    store.load_state_dict(fed["clients"])
    assert sorted(p.parent.name for p in store._files.values()) == ["client_states"] * 4
    module.load_state(fed["global_state"])
    module.eval()
    margins = {}
    for cid in range(4):
        module.load_state(store.get(cid)["personal"])
        batch = dm.collate(list(dm.client(cid).test_set.items))
        with torch.no_grad():
            chosen, rejected = module.sequence_log_probs(batch)
        margins[cid] = (chosen - rejected).mean().item()
        assert abs(margins[cid] - test["clients"][str(cid)]["logp_margin"]) < 1e-4, (
            cid,
            margins[cid],
            test["clients"][str(cid)],
        )
    assert len({round(m, 6) for m in margins.values()}) == 4  # personal parts differ between clients
