"""HierarchicalDataSelection: deterministic, removes cross-client duplicates, applies coresets."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from lightning_fed.selection import HierarchicalDataSelection
from tests.selection.conftest import PROXY, family_of, planted, stand_in_server, tiny_sft

FAMILIES = ("uppercase", "last_word", "count_words")
# the server's public anchors: a small sample of the same kind of data (other rows, other seed)
ANCHORS = {"num_clients": 1, "examples_per_client": 48, "families": list(FAMILIES), "families_per_client": 3, "seed": 9}


def turbo(**kwargs):
    kwargs.setdefault("frame", "anchored")
    return HierarchicalDataSelection(
        proxy=PROXY, anchors="synthetic:instructions", anchor_args=ANCHORS, num_anchors=48, figures=False, **kwargs
    )


@pytest.fixture(scope="module")
def setting():
    module = tiny_sft()
    # every one of 6 clients holds all 3 families: each family is duplicated across 6 clients
    return module, planted(module, num_clients=6, per_client=40, families=FAMILIES, per=3)


def shipped_hook(config: str, **overrides) -> HierarchicalDataSelection:
    """The selection hook exactly as a shipped config builds it (its ``init_args``)."""
    import yaml

    hooks = yaml.safe_load((Path(__file__).parents[2] / "configs" / config).read_text())["federation"]["hooks"]
    (args,) = [h["init_args"] for h in hooks if h["class_path"].endswith("HierarchicalDataSelection")]
    return HierarchicalDataSelection(**{**args, "figures": False, **overrides})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_inter_client_selection_removes_cross_client_duplicates(setting, seed):
    """The default configuration (configs/fedhds_turbo.yaml: anchored frame) on 6 clients that all
    hold the same 3 families. Measured: 18 client groups, 3 server groups, one sample of each
    family, 3 of 240 samples, for seeds 0, 1 and 2 (the paper's local frame: 1 of 3 seeds)."""
    module, dm = setting
    server, clients = stand_in_server(dm), list(range(6))
    hook = shipped_hook("fedhds_turbo.yaml", seed=seed)
    assert hook.frame == "anchored"
    sel = hook.choose(server, None, module, 0, clients)
    chosen = [dm.client(c).full_train[i] for c in clients for i in sel.indices[c]]
    # about one group per planted family, and every family kept once
    assert abs(sel.info["selected_groups"] - len(FAMILIES)) <= 1, sel.info
    assert set(Counter(family_of(module, it) for it in chosen)) == set(FAMILIES)
    total = sum(len(dm.client(c).full_train) for c in clients)
    assert len(chosen) <= 0.1 * total
    if seed:
        return
    # only 2-D centroids travel: 2 float32 per client group
    assert sel.up_bytes == 4 * 2 * sel.info["client_groups"]
    # without the server step (FedHDS-dagger) every client keeps its groups: duplicates stay
    intra = turbo(inter_client=False).choose(server, None, module, 0, clients)
    kept = [family_of(module, dm.client(c).full_train[i]) for c in clients for i in intra.indices[c]]
    assert len(kept) >= 3 * len(FAMILIES) and set(kept) == set(FAMILIES)


def test_selection_is_deterministic_given_a_seed(setting):
    module, dm = setting
    server, clients = stand_in_server(dm), [0, 2, 4]
    for kwargs in ({"frame": "local"}, {"frame": "anchored", "dp_sigma": 0.05}):
        first = turbo(seed=7, **kwargs).choose(server, None, module, 3, clients)
        second = turbo(seed=7, **kwargs).choose(server, None, module, 3, clients)
        assert first.indices == second.indices
        for c in clients:
            assert np.array_equal(first.points[c], second.points[c])


def test_fedhds_uses_the_tuned_models_features_and_the_papers_local_frame(setting):
    module, dm = setting
    hook = HierarchicalDataSelection(min_cluster_size=5, frame="local", figures=False)
    sel = hook.choose(stand_in_server(dm), None, module, 0, [1, 3])
    assert sel.info["client_groups"] >= 2 and 1 <= sel.info["selected_groups"] <= sel.info["client_groups"]
    assert set(sel.seconds[1]) == {"extract", "fusion", "cluster"}
    assert all(v.shape == (len(dm.client(c).full_train), 2) for c, v in sel.points.items())


def test_round_start_restricts_clients_and_skips_empty_coresets(setting):
    module, dm = setting
    hook = turbo()
    clients = [0, 1, 2, 3]
    hook.select_from_data(stand_in_server(dm), None, module, 0, clients, dm)
    record = hook._record
    assert clients == record["trained"] and 1 <= len(clients) <= 3  # 3 groups: at most 3 clients train
    for c in clients:
        assert len(dm.client(c).train_set) == record["selected_sizes"][c] > 0
    assert record["data_fraction"] == sum(record["selected_sizes"].values()) / 160
    # a client the server did not choose keeps training when min_clients requires it
    clients = [0, 1, 2, 3]
    hook.select_from_data(stand_in_server(dm, min_clients=4), None, module, 1, clients, dm)
    assert clients == [0, 1, 2, 3]
    for c in range(6):
        dm.client(c).select(None)


def test_bad_arguments_fail_early():
    with pytest.raises(ValueError, match=r"^federation.hooks\[\].fusion must be one of"):
        HierarchicalDataSelection(fusion="umap")
    with pytest.raises(ValueError, match="`anchors` must name a data set"):
        HierarchicalDataSelection(frame="anchored")
    with pytest.raises(ValueError, match=r"^federation.hooks\[\].min_cluster_size must be >= 2, got 1$"):
        HierarchicalDataSelection(min_cluster_size=1)
    with pytest.raises(ValueError, match=r"^federation.hooks\[\].tsne_iters must be >= 250"):
        HierarchicalDataSelection(tsne_iters=100)


def test_frame_defaults_to_anchored_when_anchors_are_given_else_warns():
    assert HierarchicalDataSelection(anchors="synthetic:instructions").frame == "anchored"
    with pytest.warns(UserWarning, match="own t-SNE frame"):
        assert HierarchicalDataSelection().frame == "local"
    assert shipped_hook("fedhds.yaml").frame == "anchored"


def test_a_federated_run_logs_time_bytes_and_figures(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger

    from lightning_fed.callbacks import FederatedLoop
    from tests.helpers.runs import fit

    module = tiny_sft()
    data = planted(module, num_clients=4, per_client=30, families=FAMILIES, per=2, val_fraction=0.2)
    hook = HierarchicalDataSelection(proxy=PROXY, min_cluster_size=5, frame="local")
    loop = FederatedLoop(rounds=2, clients_per_round=2, local_steps=None, local_epochs=1, seed=0, hooks=[hook])
    trainer = fit(module, data, loop, str(tmp_path), logger=TensorBoardLogger(str(tmp_path), name="tb"))
    assert [r["round"] for r in hook.history] == [1, 2]
    for record in hook.history:
        assert 0 < record["data_fraction"] <= 0.25
        assert record["up_bytes"] == 8 * record["client_groups"] > 0
        for c in record["trained"]:
            assert set(record["seconds"][c]) == {"extract", "fusion", "cluster", "train"}
        assert 0 < record["selection_share"] < 1
    # FedAvg weights and local steps follow the coresets
    assert loop.server.report.history[-1]["clients"] == hook.history[-1]["trained"]
    out = tmp_path / "tb" / "version_0"
    saved = json.loads((out / "selection.json").read_text())
    assert saved["summary"]["rounds"] == 2 and saved["summary"]["selection_up_bytes"] > 0
    import importlib.util

    assert importlib.util.find_spec("matplotlib"), (
        "selection figures need matplotlib: add it to requirements.txt / setup.cfg"
    )
    assert sorted(p.name for p in (out / "selection").glob("*.png")) == ["round_001.png", "round_002.png"]
    assert trainer.logger is not None
