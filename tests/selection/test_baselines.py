"""The coreset baselines: Random, Perplexity, Coreset-Cent, GlobalSelect."""

import numpy as np
import pytest

from lightning_fed.selection import CentralizedCoreset, GlobalSelect, PerplexitySelection, RandomSelection
from lightning_fed.selection.baselines import perplexities
from tests.selection.conftest import PROXY, planted, stand_in_server, tiny_sft


@pytest.fixture(scope="module")
def setting():
    module = tiny_sft()
    return module, planted(module, num_clients=4, per_client=30, families=("uppercase", "last_word"), per=2)


def test_random_keeps_a_seeded_ratio(setting):
    module, dm = setting
    server = stand_in_server(dm)
    first = RandomSelection(ratio=0.1, seed=1).choose(server, None, module, 2, [0, 3])
    assert {c: len(v) for c, v in first.indices.items()} == {0: 3, 3: 3}
    assert first.indices == RandomSelection(ratio=0.1, seed=1).choose(server, None, module, 2, [0, 3]).indices
    assert first.indices != RandomSelection(ratio=0.1, seed=1).choose(server, None, module, 3, [0, 3]).indices
    with pytest.raises(ValueError, match=r"^federation.hooks\[\].ratio must be in \(0, 1\], got 0.0$"):
        RandomSelection(ratio=0.0)


def test_perplexity_keeps_the_lowest_perplexity_samples(setting):
    module, dm = setting
    sel = PerplexitySelection(ratio=0.2).choose(stand_in_server(dm), None, module, 0, [1])
    scores = perplexities(module.model, dm.client(1).full_train, module.tokenizer.pad_token_id)
    assert len(sel.indices[1]) == 6
    assert max(scores[sel.indices[1]]) <= np.sort(scores)[5] + 1e-9


def test_centralized_coreset_sees_all_data_and_keeps_one_sample_per_centre(setting):
    module, dm = setting
    sel = CentralizedCoreset(ratio=0.05, seed=0).choose(stand_in_server(dm), None, module, 0, [0, 1, 2, 3])
    assert sum(len(v) for v in sel.indices.values()) == sel.info["selected_groups"] == 6  # ceil(0.05 * 120)
    assert sel.up_bytes > 0 and sel.server_seconds > 0


def test_global_select_clusters_all_fused_features_on_the_server(setting):
    module, dm = setting
    sel = GlobalSelect(proxy=PROXY, min_cluster_size=5, figures=False).choose(
        stand_in_server(dm), None, module, 0, [0, 2]
    )
    assert sel.up_bytes == 4 * 2 * 60  # every sample's 2-D feature
    assert 1 <= sum(len(v) for v in sel.indices.values()) == sel.info["selected_groups"] <= 12
    assert all("cluster" not in s for s in sel.seconds.values())
