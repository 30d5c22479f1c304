"""One round contract, two transports: every shipped config reaches the same global state and the
same traffic in process and through the package's Flower ServerApp/ClientApp (in-process grid).

Each config in ``configs/`` runs in a tiny variant (:func:`tiny_variant`): 2 rounds of at most 2
local steps, a 2-layer GPT-2 with the byte tokenizer in place of a pretrained backbone, and the
synthetic data of a tiny sibling config in place of data that needs the hub or a prepared file.
The global state after the 2 rounds must match (rtol 1e-5: same code path and seeds, only the
float summation order may differ) and the per-round uplink/downlink bytes must be equal.

A config whose round hooks choose from the clients' data on the server cannot run under Flower:
it fails at start with one line naming the hook (:data:`LOCAL_ONLY`, with the reason). The RLFT
stage of FedBis/FedBiscuit is the server's own training (:data:`SERVER_ONLY`): it fails at start
with one line naming ``data``, the selector configs it follows run here like any other. Most configs
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

# Round hooks that read a hub set: those of the synthetic sibling.
HOOKS_FROM = {"fedhds_dolly.yaml": "fedhds.yaml"}

# The RLFT stage runs on the server (Wu et al., 2024, App. A.2): the server's prompts, the policy at
# theta_0 and the selector(s) make D_gen, and the policy is DPO-trained on it there. A Flower run
# would have to ship D_gen to the SuperNodes or rebuild it on each from every client's preference
# data, so the ServerApp refuses it at start (pipelines/fedbis.flower_refusal).
SERVER_ONLY = {"fedbis_rlft.yaml", "fedbiscuit_rlft.yaml"}

LOCAL_ONLY = {
    "fedhds_coreset_cent.yaml": ("CentralizedCoreset", "the server clusters all clients' examples itself"),
    "fedhds_global_select.yaml": ("GlobalSelect", "the server reads every client's features"),
    "fedhds_perplexity.yaml": ("PerplexitySelection", "the server scores each client's examples"),
    "fedhds_random.yaml": ("RandomSelection", "the server draws from each client's examples"),
}

FAST = {
    "tiny.yaml",
    "secagg.yaml",
    "fedbiot.yaml",
    "fednova.yaml",
    "orpo.yaml",
    "fedpdpo.yaml",
    "fedhds_random.yaml",
    "feddpo_int8.yaml",
    "feddpo_flora.yaml",
}


def _config(name: str) -> dict:
    return yaml.safe_load((ROOT / "configs" / name).read_text())


def tiny_variant(name: str) -> dict:
    """``configs/<name>`` in small (see the module docstring)."""
    cfg = copy.deepcopy(_config(name))
    model = cfg["model"]["init_args"]
    replaced = bool((model.get("backbone") or {}).get("name_or_path"))
    if replaced:
        model["backbone"] = {**TINY_BACKBONE, "tokenizer": "bytes"}
        if "shared_layers" in model:  # FedPer: the shared blocks of 2
            model["shared_layers"] = 1
    if name in DATA_FROM:
        cfg["data"] = copy.deepcopy(_config(DATA_FROM[name])["data"])
    data = cfg["data"].setdefault("init_args", {})
    if data.get("template") == "chat":  # the byte tokenizer has no chat template
        data["template"] = "plain"
        data.pop("system_prompt", None)
    if replaced:  # byte tokens: several times the pretrained tokenizer's count
        data["max_length"] = max(int(data.get("max_length") or 0), 512)
    if data.get("num_clients"):
        data["num_clients"] = min(int(data["num_clients"]), 6)
    synthetic = data.get("synthetic_args")
    if isinstance(synthetic, dict):
        synthetic["examples_per_client"] = min(int(synthetic.get("examples_per_client", 16)), 16)
        if "num_clients" in synthetic and data.get("num_clients"):
            synthetic["num_clients"] = data["num_clients"]
    fed = cfg["federation"]
    if name in HOOKS_FROM:
        fed["hooks"] = copy.deepcopy(_config(HOOKS_FROM[name])["federation"]["hooks"])
    fed["rounds"] = 2
    if fed.get("local_steps"):  # FedRep's head steps must leave the body a step
        fed["local_steps"] = max(min(int(fed["local_steps"]), 2), int(model.get("head_steps", 0)) + 1)
    if data.get("num_clients"):
        fed["clients_per_round"] = min(int(fed.get("clients_per_round", 2)), data["num_clients"])
    fed["min_clients"] = min(int(fed.get("min_clients", 1)), int(fed.get("clients_per_round", 2)))
    fed.pop("eval_panel_size", None)
    strategy = fed.get("strategy")
    if isinstance(strategy, dict) and str(strategy.get("class_path", "")).endswith("SecureAggregation"):
        strategy = strategy.get("init_args", {}).get("strategy")  # secagg.yaml: the clients draw DP noise shares
    if isinstance(strategy, dict) and str(strategy.get("class_path", "")).endswith("ClientLevelDP"):
        # The server draws the noise: one seed gives the same draws in both transports.
        strategy.setdefault("init_args", {})["seed"] = 0
    if isinstance(model.get("dp_sgd"), dict):  # DP-SGD's noise: keyed by (seed, round, client, step)
        model["dp_sgd"]["seed"] = 0
    for hook in fed.get("hooks") or []:
        args = hook.get("init_args") or {}
        if args.get("anchors") and not str(args["anchors"]).startswith("synthetic:"):  # a hub set
            args["anchors"] = "synthetic:instructions"
            args["anchor_args"] = {"num_clients": 1, "examples_per_client": 32, "seed": 9}
            args["num_anchors"] = 32
    cfg["trainer"] = {"default_root_dir": "runs/parity", "enable_model_summary": False}
    return cfg


def _params():
    for name in CONFIGS:
        marks = [] if name in FAST | SERVER_ONLY else [pytest.mark.slow]
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
    if name in SERVER_ONLY:
        with pytest.raises(ValueError, match=r"^data: RLFTDataModule cannot run under Flower: RLFT trains") as info:
            run_on_grid(str(path), tmp_path / "flower", [])
        assert "\n" not in str(info.value)
        assert not (tmp_path / "flower").exists()  # refused before anything is written
        return
    local = run_in_process(str(path), tmp_path / "local", [])
    server, _ = run_on_grid(str(path), tmp_path / "flower", [])
    remote = server.server
    assert_same_state(local.server.global_state, remote.global_state)
    keys = ("clients", "aggregated", "up_bytes", "down_bytes")
    if local.server.report.private:  # the sample is secret, in no record: the servers' own draws
        keys = ("up_bytes", "down_bytes")
        rounds = range(len(local.server.report.history))
        assert [remote.sample(r) for r in rounds] == [local.server.sample(r) for r in rounds]
    for key in keys:
        assert [r[key] for r in remote.report.history.lines()] == [
            r[key] for r in local.server.report.history.lines()
        ], key
