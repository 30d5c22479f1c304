"""A private FedBiscuit run: the selector losses leave each client noised, the same in both
transports, and the report accounts them (``selector_losses`` channel, ``client_all_channels``)."""

import json

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_fed.privacy import PrivacyAccountant
from lightning_fed.privacy.accountant import composed_epsilon
from tests.helpers.flower_sim import ROOT, assert_same_state, run_in_process, run_on_grid


def _private_fedbiscuit(tmp_path):
    """configs/fedbiscuit_tiny.yaml (6 clients, U = 3, T = 1: grouped at round 4) behind ClientLevelDP, z = 1."""
    cfg = yaml.safe_load((ROOT / "configs" / "fedbiscuit_tiny.yaml").read_text())
    fed = cfg["federation"]
    fed.update(rounds=4, privacy={"noise_multiplier": 1.0})
    fed["strategy"] = {
        "class_path": "lightning_fed.privacy.ClientLevelDP",
        "init_args": {"strategy": fed["strategy"], "clip_norm": 0.5, "seed": 0},
    }
    path = tmp_path / "private_fedbiscuit.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_selector_losses_are_noised_and_accounted_in_both_transports(tmp_path):
    """sigma = z L sqrt(U) = 1 * 1 * sqrt(3); one grouping (round 4) at rate 1; the update channel
    4 rounds of 2 of 6 clients (fixed size: rate 1). The noise is seeded from ClientLevelDP's seed,
    so both transports receive the same noised rows and reach the same state."""
    config = _private_fedbiscuit(tmp_path)
    local = run_in_process(config, tmp_path / "local", [])
    server, _ = run_on_grid(config, tmp_path / "flower", [])
    remote = server.server
    assert_same_state(local.server.global_state, remote.global_state)
    summaries = [json.loads(next((tmp_path / t).rglob("summary.json")).read_text()) for t in ("local", "flower")]
    (grouping,) = local.server.hooks[0].groupings
    (remote_grouping,) = remote.hooks[0].groupings
    assert remote_grouping["assignment"] == grouping["assignment"] and grouping["round"] == 4
    torch.testing.assert_close(torch.tensor(remote_grouping["losses"]), torch.tensor(grouping["losses"]))
    rows = torch.tensor(grouping["losses"])
    assert ((rows < 0) | (rows > 1)).any()  # a clipped loss is in [0, 1]: these rows carry the noise
    assert grouping["noise_std"] == pytest.approx(3**0.5)
    assert local.server.strategy.wrapped.client_sizes == [8] * 6  # 9 training examples each, bucketed
    for server_round, summary in zip((local.server, remote), summaries):
        assert server_round.hooks[0].noised_groupings == 1
        assert summary["hooks"]["ClientGrouping"]["groupings"][0]["losses"] == grouping["losses"]
        privacy = summary["privacy"]
        delta = privacy["client_level"]["delta"]
        update, selector = PrivacyAccountant(1.0, 1.0, delta), PrivacyAccountant(1.0, 1.0, delta)
        channel = privacy["channels"]["selector_losses"]
        assert channel["protection"] == "gaussian"
        assert channel["guarantees"] == [{"unit": "client", "epsilon": selector.epsilon(1), "delta": delta}]
        assert privacy["epsilon"]["client"] == pytest.approx(update.epsilon(4), rel=1e-9)
        all_channels = composed_epsilon([(update, 4), (selector, 1)], delta)
        assert privacy["epsilon"]["client_all_channels"] == pytest.approx(all_channels, rel=1e-9)
        assert privacy["epsilon"]["client_all_channels"] > privacy["epsilon"]["client"]
        assert privacy["selector_losses"]["groupings"] == 1 and privacy["selector_losses"]["clip"] == 1.0
    # Per round (the Flower server's TensorBoard): the update channel alone until the grouping of round 4.
    events = EventAccumulator(str(tmp_path / "flower"))
    events.Reload()
    per_round = [(e.step, e.value) for e in events.Scalars("privacy/epsilon_all_channels")]
    expected = [update.epsilon(r) for r in (1, 2, 3)] + [composed_epsilon([(update, 4), (selector, 1)], delta)]
    assert [s for s, _ in per_round] == [1, 2, 3, 4]
    assert [v for _, v in per_round] == pytest.approx(expected, rel=1e-6)


def _private_grouping_run(root, rounds, data_path, ckpt=None):
    """6 clients, U = 3, T = 1: warm-up rounds 1-3, groupings at rounds 4 and 6; ClientLevelDP z = 1."""
    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.privacy import ClientLevelDP, PrivacyConfig
    from lightning_fed.round_hooks.client_grouping import ClientGrouping
    from lightning_fed.strategies import FedBiscuit
    from tests.helpers.runs import fit
    from tests.helpers.selector_data import one_thread
    from tests.modules.test_selector import selector_data, tiny_selector

    strategy = ClientLevelDP(FedBiscuit(num_selectors=3, warmup_rounds=1, regroup_every=2), clip_norm=0.5, seed=0)
    loop = FederatedLoop(
        rounds=rounds,
        clients_per_round=2,
        local_steps=1,
        seed=0,
        strategy=strategy,
        privacy=PrivacyConfig(noise_multiplier=1.0),
        hooks=[ClientGrouping()],
    )
    with one_thread():
        fit(tiny_selector(num_selectors=3), selector_data(data_path, 6, batch_size=4), loop, str(root), ckpt_path=ckpt)
    return loop


def test_the_grouping_count_survives_a_resume(tmp_path):
    """Stopped after round 4 (one grouping) and resumed to 6: two noised groupings, the same noised
    rows and the same epsilon as a run of 6 rounds straight."""
    from tests.helpers.selector_data import write_planted_selector_data

    path = write_planted_selector_data(tmp_path / "d.jsonl", 6, 12, groups=("positive", "negative", "formal"))
    straight = _private_grouping_run(tmp_path / "straight", 6, path)
    _private_grouping_run(tmp_path / "first", 4, path)
    resumed = _private_grouping_run(tmp_path / "resumed", 6, path, ckpt=str(tmp_path / "first" / "ckpt" / "last.ckpt"))
    assert resumed.server.hooks[0].noised_groupings == straight.server.hooks[0].noised_groupings == 2
    assert resumed.server.hooks[0].groupings == straight.server.hooks[0].groupings
    a, b = resumed.server.privacy_section(), straight.server.privacy_section()
    assert a["epsilon"] == b["epsilon"] and a["selector_losses"]["groupings"] == 2
