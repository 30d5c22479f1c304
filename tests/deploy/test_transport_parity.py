"""One round contract, two transports: every shipped config reaches the same global state and the
same traffic in process and through the package's Flower ServerApp/ClientApp (in-process grid).

Each config in ``configs/`` runs in a tiny variant (:func:`tiny_variant`): 2 rounds of at most 2
local steps, a 2-layer GPT-2 with the byte tokenizer in place of a pretrained backbone, and the
synthetic data of a tiny sibling config in place of data that needs the hub or a prepared file.
The global state after the 2 rounds must match (rtol 1e-5: same code path and seeds, only the
float summation order may differ) and the per-round uplink/downlink bytes must be equal.

A config whose round hooks choose from the clients' data on the server cannot run under Flower:
it fails at start with one line naming the hook (:data:`LOCAL_ONLY`, with the reason). Most configs
are marked slow (a few seconds each on 2 cores); :data:`FAST` keeps one of each engine path in CI.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from tests.helpers.flower_sim import assert_same_state, run_in_process, run_on_grid

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("*.yaml"))

TINY_BACKBONE = {"config": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 512}}

# Data that needs the hub or a prepared file: the synthetic data of a tiny sibling of the same kind.
DATA_FROM = {
    "fedbis_tldr.yaml": "fedbis_tiny.yaml",
    "fedbiscuit_shp.yaml": "fedbiscuit_tiny.yaml",
    "fedpdpo_imdb.yaml": "tiny.yaml",
    "real_text_feddpo.yaml": "tiny.yaml",
    "real_text_fedpdpo.yaml": "tiny.yaml",
    "real_text_fedit.yaml": "fedhds_turbo_tiny.yaml",
    "fedhds_dolly.yaml": "fedhds_turbo_tiny.yaml",
}

LOCAL_ONLY = {
    "fedhds_coreset_cent.yaml": ("CentralizedCoreset", "the server clusters all clients' examples itself"),
    "fedhds_global_select.yaml": ("GlobalSelect", "the server reads every client's features"),
    "fedhds_perplexity.yaml": ("PerplexitySelection", "the server scores each client's examples"),
    "fedhds_random.yaml": ("RandomSelection", "the server draws from each client's examples"),
}

FAST = {"tiny.yaml", "fedbiot.yaml", "fednova.yaml", "orpo.yaml", "fedpdpo.yaml", "fedhds_random.yaml"}


def _config(name: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / name).read_text())


def tiny_variant(name: str) -> dict:
    """``configs/<name>`` in small (see the module docstring)."""
    cfg = copy.deepcopy(_config(name))
    backbone = cfg["model"]["init_args"].get("backbone") or {}
    if backbone.get("name_or_path"):
        cfg["model"]["init_args"]["backbone"] = {**TINY_BACKBONE, "tokenizer": "bytes"}
    if name in DATA_FROM:
        cfg["data"] = copy.deepcopy(_config(DATA_FROM[name])["data"])
    data = cfg["data"].setdefault("init_args", {})
    if data.get("template") == "chat":  # the byte tokenizer has no chat template
        data["template"] = "plain"
    data["max_length"] = max(int(data.get("max_length") or 0), 256)
    num_clients = min(int(data.get("num_clients") or 4), 6)
    data["num_clients"] = num_clients
    synthetic = data.get("synthetic_args")
    if isinstance(synthetic, dict):
        synthetic["examples_per_client"] = min(int(synthetic.get("examples_per_client", 16)), 16)
        if "num_clients" in synthetic:
            synthetic["num_clients"] = num_clients
    fed = cfg["federation"]
    fed["rounds"] = 2
    if fed.get("local_steps"):
        fed["local_steps"] = min(int(fed["local_steps"]), 2)
    fed["clients_per_round"] = min(int(fed.get("clients_per_round", 2)), num_clients)
    fed["min_clients"] = min(int(fed.get("min_clients", 1)), fed["clients_per_round"])
    fed.pop("eval_panel_size", None)
    cfg["trainer"] = {"default_root_dir": "runs/parity", "enable_model_summary": False}
    return cfg


def _params():
    for name in CONFIGS:
        marks = [] if name in FAST else [pytest.mark.slow]
        yield pytest.param(name, marks=marks, id=name.removesuffix(".yaml"))


@pytest.mark.parametrize("name", list(_params()))
def test_in_process_and_flower_reach_the_same_state(name, tmp_path):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(tiny_variant(name)))
    if name in LOCAL_ONLY:
        hook, _reason = LOCAL_ONLY[name]
        with pytest.raises(ValueError, match=rf"^federation.hooks: {hook} cannot run under Flower") as info:
            run_on_grid(str(path), tmp_path / "flower", [])
        assert "\n" not in str(info.value)
        return
    local = run_in_process(str(path), tmp_path / "local", [])
    server, _ = run_on_grid(str(path), tmp_path / "flower", [])
    remote = server.server
    assert_same_state(local.global_state, remote.global_state)
    for key in ("clients", "aggregated", "up_bytes", "down_bytes"):
        assert [r[key] for r in remote.report.history] == [r[key] for r in local.report.history], key
